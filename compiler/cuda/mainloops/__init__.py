"""Mainloop policies: how a leaf's loops feed its dots, one module each (base.Mainloop is the
interface). The analyse stage picks one per leaf (registry.choose_mainloop) into its
KernelPlan; the emit stage asks only it. Adding a mainloop: one module with a Mainloop
subclass, its line in registry.REGISTRY and its case in registry.choose_mainloop."""
