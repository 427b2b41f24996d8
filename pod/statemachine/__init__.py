"""The pod's pure state machines: PodMachine (machine), one job's state (state), their messages and
the plan check."""
