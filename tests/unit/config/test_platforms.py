"""The platform -> topology table (`config.platforms`), one case per platform, and its errors."""

from __future__ import annotations

import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascendfactory.config import platforms
from ascendfactory.config.platforms import detect
from ascendfactory.errors import ConfigError

MODELARTS = {  # a worker of a 2-instance ModelArts training job (the page's own variable names)
    "MA_NUM_HOSTS": "2",
    "VC_TASK_INDEX": "1",
    "VC_WORKER_NUM": "2",
    "VC_WORKER_HOSTS": "job-abc-worker-0.job-abc,job-abc-worker-1.job-abc",
    "MA_NUM_GPUS": "8",
    "MA_CURRENT_IP": "192.168.0.12",
}


@pytest.mark.parametrize(
    ("environ", "platform", "values"),
    [
        (
            MODELARTS,
            "ModelArts",
            {"NNODES": 2, "NODE_RANK": 1, "MASTER_ADDR": "job-abc-worker-0.job-abc", "NPUS_PER_NODE": 8},
        ),
        (  # what `submit k8s --kind volcano` gets from the svc and env plugins; task "data-worker"
            {
                "VC_TASK_INDEX": "2",
                "VC_DATA_WORKER_HOSTS": "j-w-0.j,j-w-1.j,j-w-2.j",
                "VC_DATA_WORKER_NUM": "3",
            },
            "Volcano",
            {"NNODES": 3, "NODE_RANK": 2, "MASTER_ADDR": "j-w-0.j"},
        ),
        (
            {
                "SLURM_JOB_ID": "42",
                "SLURM_NODEID": "1",
                "SLURM_NNODES": "4",
                "SLURM_JOB_NODELIST": "gpu[07-10]",
                "SLURM_GPUS_ON_NODE": "8",
                "SLURM_STEP_TASKS_PER_NODE": "1(x4)",
            },
            "Slurm",
            {"NNODES": 4, "NODE_RANK": 1, "MASTER_ADDR": "gpu07", "NPUS_PER_NODE": 8},
        ),
        (  # training-operator v1.9.0: WORLD_SIZE is pods x nproc; PET_NNODES wins
            {
                "KUBERNETES_SERVICE_HOST": "10.0.0.1",
                "MASTER_ADDR": "pj-master-0",
                "MASTER_PORT": "23456",
                "WORLD_SIZE": "16",
                "RANK": "1",
                "PET_NNODES": "2",
                "PET_NODE_RANK": "1",
                "PET_NPROC_PER_NODE": "8",
            },
            "Kubeflow",
            {
                "NNODES": 2,
                "NODE_RANK": 1,
                "MASTER_ADDR": "pj-master-0",
                "MASTER_PORT": 23456,
                "NPUS_PER_NODE": 8,
            },
        ),
        (  # an older operator: WORLD_SIZE = pods, RANK = pod index; PET_NPROC_PER_NODE=auto: torchrun's
            {
                "KUBERNETES_SERVICE_HOST": "10.0.0.1",
                "MASTER_ADDR": "pj-master-0",
                "MASTER_PORT": "23456",
                "WORLD_SIZE": "3",
                "RANK": "2",
                "PET_NPROC_PER_NODE": "auto",
            },
            "Kubeflow",
            {"NNODES": 3, "NODE_RANK": 2, "MASTER_ADDR": "pj-master-0", "MASTER_PORT": 23456},
        ),
        (
            {
                "SKYPILOT_NODE_RANK": "0",
                "SKYPILOT_NUM_NODES": "2",
                "SKYPILOT_NODE_IPS": "10.1.0.5\n10.1.0.6\n",
                "SKYPILOT_NUM_GPUS_PER_NODE": "4",
            },
            "SkyPilot",
            {"NNODES": 2, "NODE_RANK": 0, "MASTER_ADDR": "10.1.0.5", "NPUS_PER_NODE": 4},
        ),
    ],
)
def test_each_platform(environ, platform, values):
    d = detect(environ)
    assert d is not None and d.platform == platform
    assert d.values == values
    assert set(d.sources) == set(values)
    for key, source in d.sources.items():
        assert platform in source  # "SLURM_NODEID=1 (Slurm)"


def test_nothing_detected_on_a_plain_machine():
    assert detect({"HOME": "/root", "PATH": "/usr/bin"}) is None


@pytest.mark.parametrize(
    "environ",
    [
        {
            "TORCHELASTIC_RUN_ID": "x",
            "MASTER_ADDR": "a",
            "WORLD_SIZE": "2",
            "RANK": "0",
            "KUBERNETES_SERVICE_HOST": "h",
        },  # a torchrun child is no Kubeflow pod
        {"MASTER_ADDR": "a", "WORLD_SIZE": "2", "RANK": "0"},  # no Kubernetes
        {"VC_TASK_INDEX": "0"},  # the env plugin without svc: no hosts, no node count
    ],
)
def test_partial_or_foreign_variables_are_no_platform(environ):
    assert detect(environ) is None


def test_two_platforms_at_once_is_an_error():
    environ = {**MODELARTS, "SLURM_JOB_ID": "1", "SLURM_NODEID": "0", "SLURM_NNODES": "1"}
    with pytest.raises(ConfigError) as e:
        detect(environ)
    assert "two cluster platforms at once: ModelArts" in str(e.value) and "Slurm" in str(e.value)


def test_rank_outside_the_node_count_is_an_error():
    with pytest.raises(ConfigError) as e:
        detect({**MODELARTS, "VC_TASK_INDEX": "2"})
    assert "VC_TASK_INDEX=2 (ModelArts) is outside the node count MA_NUM_HOSTS=2" in str(e.value)


def test_a_value_that_is_no_number_is_an_error():
    with pytest.raises(ConfigError) as e:
        detect({"PET_NNODES": "1:4", "PET_NODE_RANK": "0"})
    assert "PET_NNODES='1:4'" in str(e.value) and "elastic" in str(e.value)


def test_several_volcano_tasks_are_refused():
    environ = {"VC_TASK_INDEX": "0", "VC_MASTER_HOSTS": "m-0.j", "VC_WORKER_HOSTS": "w-0.j,w-1.j"}
    with pytest.raises(ConfigError, match="several tasks"):
        detect(environ)


def test_several_slurm_tasks_per_node_leave_a_rank_problem():
    environ = {
        "SLURM_JOB_ID": "1",
        "SLURM_NODEID": "0",
        "SLURM_NNODES": "1",
        "SLURM_JOB_NODELIST": "n1",
        "SLURM_STEP_TASKS_PER_NODE": "2",
    }
    d = detect(environ)
    assert d is not None and d.rank_problem and "2 tasks per node" in d.rank_problem[0].message


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text("abcxyz-", min_size=1, max_size=4),
            st.lists(
                st.tuples(st.integers(0, 120), st.integers(0, 9), st.integers(0, 3)), min_size=0, max_size=3
            ),
        ),
        min_size=1,
        max_size=3,
    )
)
def test_the_first_host_is_python_hostlists_first(hosts):
    """Node 0's address read from Slurm's hostlist syntax, against python-hostlist's full expansion."""
    hostlist = pytest.importorskip("hostlist")
    names = []
    for prefix, ranges in hosts:
        name = prefix
        for start, extra, pad in ranges:
            name += f"[{start:0{pad}d}-{start + extra:0{pad}d},{start + extra + 2}]x"
        names.append(name)
    text = ",".join(names)
    assert platforms.slurm_first_host(text) == hostlist.expand_hostlist(text)[0]


@pytest.mark.parametrize("bad", ["n[1-", "n]1", "[", "n[a-b]", ",n1", "n[[1]]"])
def test_a_node_list_not_in_slurms_syntax_names_the_fix(bad):
    with pytest.raises(ConfigError) as e:
        platforms.slurm_first_host(bad)
    (p,) = e.value.problems
    assert p.key == "SLURM_JOB_NODELIST" and "--env.MASTER_ADDR=" in p.fix


@pytest.mark.skipif(shutil.which("scontrol") is None, reason="scontrol not installed (sh install.sh --dev)")
def test_the_first_host_is_scontrols_first_where_scontrol_answers():
    import subprocess

    done = subprocess.run(["scontrol", "show", "hostnames", "n[07-09],gpu1"], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"scontrol answers only on a configured Slurm node: {done.stderr.strip()[-200:]}")
    assert platforms.slurm_first_host("n[07-09],gpu1") == done.stdout.split()[0]


ALL_VARS = sorted(
    {
        v.replace("{TASK}", "WORKER")
        for p in platforms.PLATFORMS.registered().values()
        for group in p.present
        for v in group
    }
    | {
        v.replace("{TASK}", "WORKER")
        for p in platforms.PLATFORMS.registered().values()
        for v in (*p.nnodes, *p.node_rank, *p.devices)
    }
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(ALL_VARS),
        st.one_of(st.integers(-3, 9).map(str), st.text(max_size=6), st.just("1(x2)")),
        max_size=8,
    )
)
def test_any_environment_gives_a_consistent_topology_or_a_config_error(environ):
    try:
        d = detect(environ)
    except ConfigError:
        return
    if d is None:
        return
    v = d.values
    assert set(v) <= {"NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "NPUS_PER_NODE"}
    if "NNODES" in v and "NODE_RANK" in v:
        assert 0 <= v["NODE_RANK"] < v["NNODES"]
    assert all(isinstance(v[k], int) and v[k] >= 0 for k in v if k != "MASTER_ADDR")
