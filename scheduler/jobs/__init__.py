"""A job before it runs: its file, its checks against the kernel and storage (prepare), its hold on
its files."""
