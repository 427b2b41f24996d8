"""The //compiler program's entry point; the command line itself lives in compiler/cli/commands.py."""

from compiler.cli.commands import entry

if __name__ == "__main__":
    entry()
