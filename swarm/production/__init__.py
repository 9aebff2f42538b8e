"""Production: promotion of a candidate by evidence (paired comparisons, four eyes) and roll-back."""
