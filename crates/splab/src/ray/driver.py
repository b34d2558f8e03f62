"""splab's Ray driver: runs the points of a sweep as Ray tasks.

Started by `splab sweep --ray ADDRESS` (src/ray.rs) as
`python -c THIS ADDRESS COMMAND_JSON`. Reads the points from standard
input, one JSON line each ({"index": N, "spec": "..."}), submits each as a
task that runs `COMMAND run-spec --single-thread` on a worker with the
spec on its standard input, and prints each task's outcome as one JSON
line as it finishes ({"index", "returncode", "stdout", "stderr", "host"}).
The run store is splab's, on the driver: nothing is written here.
"""

import json
import sys

import ray


@ray.remote(num_cpus=1, max_retries=0)
def run_point(spec, command):
    import socket
    import subprocess

    p = subprocess.run(command + ["run-spec", "--single-thread"], input=spec, capture_output=True, text=True)
    return {"returncode": p.returncode, "stdout": p.stdout, "stderr": p.stderr[-4000:], "host": socket.gethostname()}


def main():
    address, command = sys.argv[1], json.loads(sys.argv[2])
    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    pending = {}
    for line in sys.stdin:
        item = json.loads(line)
        pending[run_point.remote(item["spec"], command)] = item["index"]
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        for ref in done:
            index = pending.pop(ref)
            try:
                out = dict(ray.get(ref), index=index)
            except Exception as e:  # a task that died: its worker's error
                out = {"index": index, "returncode": -1, "stdout": "", "stderr": str(e), "host": ""}
            print(json.dumps(out), flush=True)


main()
