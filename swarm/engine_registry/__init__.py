"""Django app of the inference engines (label ``engines_web``): production engines, their
benchmark history and plan tunings, the cross-layer promotion guard, engine goals and the
engine pages. The framework-free engines themselves are :mod:`engines`."""
