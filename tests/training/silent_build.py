"""`python -m tests.training.silent_build <snapshot id>`: a worker process that claims a snapshot build and then
writes nothing for ten minutes (its files step stands for a long `torch.save`); only the build's heartbeat
thread keeps the row fresh. The heartbeat test kills it with `kill -9`."""

from __future__ import annotations

import sys
import time

import django


def main() -> None:
    django.setup()
    from training import snapshot_services

    def silent_write(snapshot, folder, attempt):
        print("writing", flush=True)
        time.sleep(600)
        raise RuntimeError("the test should have killed this build")

    snapshot_services._write_files = silent_write
    print(snapshot_services.snapshot_build(snapshot_id=int(sys.argv[1])), flush=True)


if __name__ == "__main__":
    main()
