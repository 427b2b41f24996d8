"""Mainloop policies: how a leaf's loops feed its dots (base.Mainloop is the interface). The analyse
stage picks one per leaf (registry.choose_mainloop) into its KernelPlan; the emit stage asks only it.

A policy is one module (mma_sync.py), or, when it has machinery of its own, one package whose
policy.py holds the Mainloop subclass beside the code only that policy uses: simt/ (FMA dots),
wgmma/ (warpgroup MMA, TF32 and fp8 operands), pingpong/ (the handover), tma_ws/ (the TMA ring, its
TMA store and tensor maps), split_loop/ (the split over CTAs, its merge tree and factor tuning).
Adding a mainloop: one module or package with a Mainloop subclass, its line in registry.REGISTRY
and its case in registry.choose_mainloop."""
