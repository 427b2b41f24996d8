"""The //pod program's entry point; the command line itself lives in pod/cli.py."""

from pod.cli import entry

if __name__ == "__main__":
    entry()
