"""The planner: a cluster program and the nodes' figures in, one instruction list per node out
(array passes)."""
