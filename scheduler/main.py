"""The //scheduler program's entry point; the command line itself lives in scheduler/cli.py."""

from scheduler.cli import entry

if __name__ == "__main__":
    entry()
