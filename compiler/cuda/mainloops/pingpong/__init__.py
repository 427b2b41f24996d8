"""The ping-pong mainloop: policy.py (the policy value) and handover.py (the two warpgroups' turns,
handed over by mbarriers)."""
