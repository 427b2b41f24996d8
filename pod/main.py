"""The //pod program's entry point; the command line itself lives in pod/cli.py."""

from common import dataclass_code_cache

# Before pod.cli's imports make their first dataclass (common/dataclass_code_cache.py); pod.cli's
# entry installs it too, for the `phobos-pod` script, which starts there. A no-op in a pod
# forked from the command, which has it already.
dataclass_code_cache.install()

from pod.cli import entry  # noqa: E402

if __name__ == "__main__":
    entry()
