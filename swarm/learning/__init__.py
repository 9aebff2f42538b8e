"""What the swarm learns: insights computed from evidence, their store per (workload, target) for
warm starts, and the credit that shares a generation's budget among agents."""
