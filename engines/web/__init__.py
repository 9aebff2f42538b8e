"""Django app of the inference engines: production engines, their benchmark history, the
cross-layer promotion guard and the engine pages. The only Django code under ``engines/``."""
