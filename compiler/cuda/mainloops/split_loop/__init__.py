"""The split-loop mainloop (flash-decoding, split-K) and its machinery: policy.py (the policy value),
transform.py (the IR of the partial and combine kernels), plan.py (the split factor and the two bound
kernels), tree.py (the merge tree), tune.py (the factor as a tuning dimension), launch.py (a leaf as
a launch sequence)."""
