"""What `make demo` and `make test` need from the machine, checked before anything is installed.

    python3 tools/check_prereqs.py

Prints nothing and exits 0 when everything is there; otherwise prints one short message naming
what is missing and how to install it, and exits 1. Written for any Python 3 (it must run to say
that this one is too old) and the standard library alone.
"""

import os
import shutil
import subprocess
import sys

MIN_PYTHON = (3, 11)
GCLOUD_HELP = (
    "the Google Cloud CLI with its Pub/Sub emulator (https://cloud.google.com/sdk/docs/install; "
    "Debian/Ubuntu: `sudo apt-get install google-cloud-cli google-cloud-cli-pubsub-emulator`, "
    "or with the installer: `gcloud components install beta pubsub-emulator`)"
)
EMULATOR_HELP = (
    "the Pub/Sub emulator component of the Google Cloud CLI (Debian/Ubuntu: `sudo apt-get install "
    "google-cloud-cli-pubsub-emulator`; installer: `gcloud components install beta pubsub-emulator`)"
)
JAVA_HELP = (
    "Java 11 or newer, which the Pub/Sub emulator runs on (Debian/Ubuntu: `sudo apt-get install default-jre-headless`)"
)


def python_problem(version=None, executable=None):
    version = version or sys.version_info
    if tuple(version[:2]) >= MIN_PYTHON:
        return None
    return f"Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]}+ (this is {version[0]}.{version[1]}; install it, then run `make PYTHON=python3.{MIN_PYTHON[1]} ...`)"


def gcloud_problem(which=shutil.which):
    gcloud = which("gcloud")
    if gcloud is None:
        return GCLOUD_HELP
    root = os.path.dirname(os.path.dirname(os.path.realpath(gcloud)))
    emulator = os.path.join(root, "platform", "pubsub-emulator", "bin", "cloud-pubsub-emulator")
    if os.path.exists(emulator):
        return None
    return EMULATOR_HELP


def java_problem(which=shutil.which):
    java = which("java")
    if java is None:
        return JAVA_HELP
    try:
        subprocess.run([java, "-version"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return JAVA_HELP + "; `java -version` fails here"
    return None


def problems():
    return [p for p in (python_problem(), gcloud_problem(), java_problem()) if p]


def message(found):
    return "spotjobs needs " + "; and ".join(found) + "."


def main():
    found = problems()
    if found:
        sys.stderr.write(message(found) + "\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
