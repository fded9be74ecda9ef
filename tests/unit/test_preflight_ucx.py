"""Reading the UCX transports a transfer used from UCX's own log (excerpts of logs seen on two H200s,
nixl-cu13 1.5.1 / UCX 1.23, bench/results)."""

from __future__ import annotations

from qdd.preflight.ucx import parse, transports_in

CONTROL_WRITE = """\
[1795987351.632585] [vm:578  :0]   +--------+--------------------+-----------------------------------+
[1795987351.632585] [vm:578  :0]   | qdd-preflight-fetch-vm-578-0 self cfg#1                         |
[1795987351.632585] [vm:578  :0]   | remote memory write by ucp_put* from host memory to cuda/dev[3] |
[1795987351.632585] [vm:578  :0]   +--------+--------------------+-----------------------------------+
[1795987351.632585] [vm:578  :0]   | Range  |    Description     |              Config               |
[1795987351.632585] [vm:578  :0]   +--------+--------------------+-----------------------------------+
[1795987351.632585] [vm:578  :0]   | 0..inf | software emulation | tcp/lo                            |
[1795987351.632585] [vm:578  :0]   +--------+--------------------+-----------------------------------+
"""
LANES = """\
[1795987351.847614] [vm:578  :3]      ucp_worker.c:1997 UCX  INFO    qdd-preflight-fetch-vm-578-0 intra-node cfg#3 \
rma_am(tcp/lo)  amo_am(tcp/lo)  am(tcp/lo cma/memory)  ka(tcp/lo)
"""
NVLINK = CONTROL_WRITE + """\
[1795987351.837911] [vm:578  :2]   +--------+-------------+------------------------------------------------+
[1795987351.837911] [vm:578  :2]   | qdd-preflight-fetch-vm-578-0 intra-node cfg#2                         |
[1795987351.837911] [vm:578  :2]   | remote memory read by ucp_get*(multi) into cuda/GPU1 from cuda/dev[2] |
[1795987351.837911] [vm:578  :2]   +--------+-------------+------------------------------------------------+
[1795987351.837911] [vm:578  :2]   | Range  | Description |                     Config                     |
[1795987351.837911] [vm:578  :2]   +--------+-------------+------------------------------------------------+
[1795987351.837911] [vm:578  :2]   | 0..inf | zero-copy   | cuda_ipc/cuda                                  |
[1795987351.837911] [vm:578  :2]   +--------+-------------+------------------------------------------------+
""" + LANES
TCP_ONLY = CONTROL_WRITE + """\
[1795987360.140961] [vm:679  :2]   +--------+--------------------+----------------------------------+
[1795987360.140961] [vm:679  :2]   | qdd-preflight-fetch-vm-679-0 intra-node cfg#1                  |
[1795987360.140961] [vm:679  :2]   | remote memory read by ucp_get*(multi) into cuda/GPU1 from cuda |
[1795987360.140961] [vm:679  :2]   +--------+--------------------+----------------------------------+
[1795987360.140961] [vm:679  :2]   | Range  |    Description     |              Config              |
[1795987360.140961] [vm:679  :2]   +--------+--------------------+----------------------------------+
[1795987360.140961] [vm:679  :2]   | 0..inf | software emulation | tcp/lo                           |
[1795987360.140961] [vm:679  :2]   +--------+--------------------+----------------------------------+
"""
HOST = """\
[1795986702.306922] [vm:4869 :0]   +--------+-------------+-------------------------------------------+
[1795986702.306922] [vm:4869 :0]   | qdd-preflight-fetch-vm-4869-0 intra-node cfg#1                   |
[1795986702.306922] [vm:4869 :0]   | remote memory read by ucp_get*(multi) into host memory from host |
[1795986702.306922] [vm:4869 :0]   +--------+-------------+-------------------------------------------+
[1795986702.306922] [vm:4869 :0]   | Range  | Description |                  Config                   |
[1795986702.306922] [vm:4869 :0]   +--------+-------------+-------------------------------------------+
[1795986702.306922] [vm:4869 :0]   | 0..inf | zero-copy   | cma/memory                                |
[1795986702.306922] [vm:4869 :0]   +--------+-------------+-------------------------------------------+
"""


def test_nvlink_read_used_cuda_ipc_only():
    used = parse(NVLINK)
    assert (used.data, used.source) == (["cuda_ipc"], "proto_info")
    assert used.lanes == ["tcp"]  # RMA on host memory is emulated over TCP; the GPU data path is not
    assert used.evidence[0] == ("intra-node cfg#2 remote memory read by ucp_get*(multi) into cuda/GPU1 "
                                "from cuda/dev[2] -> cuda_ipc")


def test_tcp_only_read_is_software_emulation_over_tcp():
    assert parse(TCP_ONLY).data == ["tcp"]


def test_control_writes_from_host_memory_are_not_the_data_path():
    used = parse(CONTROL_WRITE)
    assert used.data == [] and used.source == "none"


def test_host_memory_runs_read_the_host_tables():
    assert parse(HOST, "host").data == ["cma"]
    assert parse(HOST, "cuda").data == []


def test_lanes_are_the_fallback_when_no_protocol_table_was_printed():
    used = parse(LANES)
    assert (used.data, used.source) == (["tcp"], "ep_lanes")


def test_transport_tokens():
    assert transports_in("50% on rc_mlx5/mlx5_0:1 and 50% on rc_mlx5/mlx5_3:1") == ["rc_mlx5"]
    assert transports_in("am(tcp/lo cma/memory cuda_ipc/cuda)") == ["cma", "cuda_ipc", "tcp"]
    assert transports_in("zero-copy") == []
