"""The splab Python package as a user calls it: runs in the process, errors
naming the bad value, sweeps into the run store, the store as a DataFrame,
the command line, and a sweep as Ray tasks on a cluster started here."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pandas
import pytest

import splab

SMALL = {"workload": "gups", "log2_table": 12, "memory": "64M"}


def test_a_run_returns_its_document_with_the_resolved_spec():
    r = splab.run(SMALL)
    assert r["figure"]["name"] == "GUP/s" and r["figure"]["value"] > 0
    assert r["spec"]["arch"] == "amd64" and r["spec"]["log2_table"] == 12 and r["spec"]["verify"] is False
    assert r["build"] == splab.build()
    off = splab.run(dict(SMALL, superpages=False))
    assert off["superpages"] is False and off["sysctl"]["vm.pmap.pg_ps_enabled"] == 0
    # The same run twice: the same figures.
    assert splab.run(SMALL)["figure"] == r["figure"]
    assert splab.resolve({"workload": "gups", "log2_table": 12, "memory": "65536K"}) == r["spec"]


def test_a_run_in_python_is_the_command_lines():
    r = splab.run(dict(SMALL, arch="arm64", policy="shimizu"))
    out = subprocess.run([sys.executable, "-m", "splab", "sim", "gups", "--log2-table", "12", "--memory", "64M", "--arch", "arm64", "--policy", "shimizu", "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    cli = json.loads(out.stdout)
    for k in ["figure", "sim_seconds", "tlb", "sysctl", "spec", "refs"]:
        assert cli[k] == r[k], k


@pytest.mark.parametrize(
    "spec, named",
    [
        ({"workload": "gupz"}, "gupz"),
        ({"workload": "gups", "log2_table": 99}, "99"),
        ({"workload": "gups", "arch": "vax"}, "vax"),
        ({"workload": "gups", "log2_tabel": 3}, "log2_tabel"),
        ({"workload": "gups", "policy": "linux-thp", "arch": "alpha"}, "alpha"),
        ({"workload": "gups", "memory": "12Q"}, "12Q"),
        ({"workload": "gups", "max_size": "1M"}, "max-size does not apply to gups"),
    ],
)
def test_bad_input_raises_input_error_naming_the_value(spec, named):
    with pytest.raises(splab.InputError) as e:
        splab.run(spec)
    assert named in str(e.value)
    assert isinstance(e.value, ValueError)


def test_a_spec_must_be_a_dict():
    with pytest.raises(splab.InputError):
        splab.run("gups")
    with pytest.raises(splab.InputError):
        splab.sweep(42)


GRID = {
    "name": "py-grid",
    "base": {"memory": "128M", "log2_table": 12},
    "axes": {"workload": ["gups"], "arch": ["amd64", "arm64"], "policy": ["freebsd", "shimizu"]},
}


def test_a_sweep_runs_each_point_once_into_the_store(tmp_path):
    store = tmp_path / "runs.db"
    points = splab.sweep(GRID, store=store, dry_run=True)
    assert len(points) == 4
    s = splab.sweep(GRID, jobs=2, store=store)
    assert (s["runs"], s["ran"], s["failed"], s["already"]) == (4, 4, 0, 0), s
    again = splab.sweep(GRID, jobs=2, store=store)
    assert (again["ran"], again["already"]) == (0, 4)
    df = splab.runs(store)
    assert isinstance(df, pandas.DataFrame) and len(df) == 4
    m = df.groupby(["arch", "policy"])["figure"].median()
    assert len(m) == 4 and (m > 0).all()
    # Each stored run is the one splab.run gives.
    one = splab.run(dict(GRID["base"], workload="gups", arch="arm64", policy="shimizu"))
    row = df[(df.arch == "arm64") & (df.policy == "shimizu")].iloc[0]
    assert row["figure"] == one["figure"]["value"] and row["tlb_misses"] == one["tlb"]["total_misses"]
    s = splab.runs(store, sweep="py-grid", where="arch = 'amd64'")
    assert len(s) == 2 and set(s["axis.policy"]) == {"freebsd", "shimizu"}
    with pytest.raises(splab.InputError) as e:
        splab.runs(store, where="no_such_column > 1")
    assert "no_such_column" in str(e.value)
    with pytest.raises(splab.InputError):
        splab.runs(tmp_path / "none.db")


def test_a_sweep_file_runs_as_its_dict(tmp_path):
    f = tmp_path / "g.toml"
    f.write_text('seeds = [1, 2]\n[base]\nworkload = "gups"\nlog2_table = 12\nmemory = "64M"\nfragment = 0.5\n')
    s = splab.sweep(f, jobs=1, store=tmp_path / "g.db")
    assert (s["sweep"], s["ran"]) == ("g", 2)
    with pytest.raises(splab.InputError) as e:
        splab.sweep({"axes": {"arch": ["vax"]}, "base": {"workload": "gups"}}, store=tmp_path / "g.db")
    assert "vax" in str(e.value)


def test_the_command_line_is_installed():
    out = subprocess.run([sys.executable, "-m", "splab", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and splab.build() in out.stdout
    out = subprocess.run([sys.executable, "-m", "splab", "sim", "gupz"], capture_output=True, text=True)
    assert out.returncode == 2 and "gupz" in out.stderr


def test_the_command_line_runs_its_children_with_this_python(tmp_path):
    # A sweep's points and reproduce's experiments are children that run
    # splab again: `python -m splab`, since this command line is Python.
    f = tmp_path / "c.toml"
    f.write_text('name = "c"\n[base]\nworkload = "gups"\nlog2_table = 12\nmemory = "64M"\n[axes]\narch = ["amd64", "arm64"]\n')
    out = subprocess.run([sys.executable, "-m", "splab", "sweep", str(f), "--jobs", "2", "--store", str(tmp_path / "c.db"), "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    assert (s["ran"], s["failed"]) == (2, 0), s
    out = subprocess.run([sys.executable, "-m", "splab", "reproduce", "--quick", "--json", "--jobs", "2", "armada-lat", "armada-bw-rd"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert [o["experiment"]["name"] for o in json.loads(out.stdout)["outcomes"]] == ["armada-lat", "armada-bw-rd"]


def test_reproduce_gives_the_published_figures_beside_the_predictions():
    r = splab.reproduce(["armada-gups", "power9-randomaccess"], quick=True, jobs=2)
    assert [o["experiment"]["name"] for o in r["outcomes"]] == ["armada-gups", "power9-randomaccess"]
    assert r["quick"] is True and r["summary"] is None
    df = splab.published(r)
    g = df[(df["experiment"] == "armada-gups") & (df["figure"] == "GUP/s") & (df["seed"] == "000")].iloc[0]
    assert (g["published_off"], g["published_on"]) == (0.003685255, 0.005530048)
    assert g["predicted_on"] > 0 and g["headline"]
    assert r["outcomes"][0]["rows"][0]["off"] == splab.reproduce("armada-gups", quick=True)["outcomes"][0]["rows"][0]["off"]
    with pytest.raises(splab.InputError) as e:
        splab.reproduce(["no-such-run"], quick=True)
    assert "no-such-run" in str(e.value)


def test_ctrl_c_stops_reproduce_and_its_children():
    names = ["power8-randomaccess", "power9-randomaccess"]
    # SIGINT as a terminal leaves it (a test run in the background may have
    # it ignored, which Python keeps, raising nothing).
    default_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
    p = subprocess.Popen([sys.executable, "-c", f"import splab; splab.reproduce({names!r}, jobs=2)"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    time.sleep(3)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode != 0 and "KeyboardInterrupt" in err, err
    left = subprocess.run(["pgrep", "-f", "splab reproduce power[89]-randomaccess"], capture_output=True, text=True).stdout
    assert left == "", f"children left running: {left}"


def ray_command():
    ray = shutil.which("ray") or os.path.join(os.path.dirname(sys.executable), "ray")
    if not os.path.exists(ray):
        pytest.fail("this test needs Ray (pip install 'ray[default]'; .ci/run installs it)")
    return ray


@pytest.fixture
def cluster():
    """A one-node Ray cluster on 127.0.0.1, stopped whatever happens."""
    try:
        import ray  # noqa: F401
    except ImportError:
        pytest.fail("this test needs Ray (pip install 'ray[default]'; .ci/run installs it)")
    ray = ray_command()
    port = str(20000 + os.getpid() % 20000)
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    try:
        subprocess.run([ray, "start", "--head", "--node-ip-address", "127.0.0.1", "--port", port, "--num-cpus", "2", "--include-dashboard", "false", "--disable-usage-stats"], check=True, capture_output=True, env=env)
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([ray, "stop", "--force"], capture_output=True, env=env)


def test_a_sweep_on_ray_gives_the_local_results(tmp_path, cluster):
    local, remote = tmp_path / "local.db", tmp_path / "ray.db"
    assert splab.sweep(GRID, jobs=2, store=local)["ran"] == 4
    s = splab.sweep(GRID, ray=cluster, store=remote)
    assert (s["ran"], s["failed"]) == (4, 0), s
    a = splab.runs(local, full=True).set_index("key")
    b = splab.runs(remote, full=True).set_index("key")
    assert set(a.index) == set(b.index)
    for k in a.index:
        da, db = json.loads(a.loc[k, "result"]), json.loads(b.loc[k, "result"])
        for doc in (da, db):
            for h in [x for x in doc if x.startswith("host")]:
                del doc[h]
        assert da == db


def test_the_readmes_line_works_on_a_store_a_sweep_made(tmp_path):
    splab.sweep(GRID, jobs=2, store=tmp_path / "splab-runs.db")
    line = "import splab; df = splab.runs('splab-runs.db'); print(df.groupby(['arch','policy'])['figure'].median())"
    out = subprocess.run([sys.executable, "-c", line], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "arm64" in out.stdout and "shimizu" in out.stdout
