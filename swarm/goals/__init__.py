"""Goals: built from a workload's defaults, validated (one validator for form and API), archived and
duplicated; goals on recorded ``replay:`` landscapes."""
