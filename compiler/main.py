"""The //compiler program's entry point; the command line itself lives in compiler/cli.py."""

from compiler.cli import entry

if __name__ == "__main__":
    entry()
