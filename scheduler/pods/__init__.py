"""Where the pods come from: started on this machine, forked, or one per Slurm task."""
