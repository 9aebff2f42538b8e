"""Formats read and written: Kernel Tuner cache files (:mod:`.tuning_cache`) and FlashInfer Trace
definitions, workloads and solutions (:mod:`.flashinfer_trace`, :mod:`.flashinfer_shapes`)."""
