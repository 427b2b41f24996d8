#!/bin/sh
echo "bazel coverage is not supported: the real coverage tools cannot be downloaded here" >&2
exit 1
