"""``peon doctor`` says what keeps a command's connections to the egress proxy: the session's network namespace,
else the kernel's Landlock TCP rules (naming what they cannot do), else nothing: no network."""

from __future__ import annotations

from peon.cli.doctor import egress_confinement
from peon.workers.sandbox.landlock import NET_ABI


def test_the_network_namespace_confines_every_protocol():
    facts = egress_confinement(True, 0)
    assert facts["available"] and facts["by"] == "network namespace" and "every other protocol" in facts["detail"]


def test_without_namespaces_the_doctor_names_landlock_tcp_rules_and_the_fallback():
    with_tcp = egress_confinement(False, NET_ABI)
    assert with_tcp["available"] and with_tcp["by"] == f"Landlock TCP rules (ABI {NET_ABI})" and with_tcp["fixes"]
    assert "name ports, not hosts" in with_tcp["detail"]
    old = egress_confinement(False, NET_ABI - 1)
    assert not old["available"] and old["by"] is None
    assert f"need ABI {NET_ABI}" in old["detail"] and "no network at all" in old["detail"]
