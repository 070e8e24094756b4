"""``peon doctor`` says what keeps a command's connections to the egress proxy: the session's network namespace,
or nothing, naming whether the kernel's Landlock TCP rules exist and that Peon does not use them yet."""

from __future__ import annotations

from peon.cli.doctor import egress_confinement
from peon.workers.sandbox.landlock import NET_ABI


def test_the_network_namespace_confines_every_protocol():
    facts = egress_confinement(True, 0)
    assert facts["available"] and facts["by"] == "network namespace" and "every other protocol" in facts["detail"]


def test_without_namespaces_the_doctor_names_landlock_tcp_rules_and_the_fallback():
    with_tcp = egress_confinement(False, NET_ABI)
    assert not with_tcp["available"] and with_tcp["by"] is None and with_tcp["fixes"]
    assert f"Landlock TCP rules (ABI {NET_ABI})" in with_tcp["detail"] and "no network at all" in with_tcp["detail"]
    old = egress_confinement(False, NET_ABI - 1)
    assert f"need ABI {NET_ABI}" in old["detail"] and "no network at all" in old["detail"]
