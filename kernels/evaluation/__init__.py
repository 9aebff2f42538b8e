"""Evaluation of one candidate, the same flow for every backend that runs candidates: the plan
(cases, inputs and expected results, :mod:`.judge`), the timing protocol (:mod:`.timing`,
:mod:`.first_call`), the checks against the float64 reference (:mod:`.reference_check`) and
the pipeline that compiles, runs the sandboxed child and classifies (:mod:`.pipeline`; CUDA's
launch plans and static evidence in :mod:`.cuda_pipeline`, :mod:`.launch_plan`, :mod:`.static`)."""
