from agent.capture.trigger import CaptureTrigger


def test_only_configured_codes_capture_and_a_storm_is_one_capture() -> None:
    t = CaptureTrigger(frozenset({"LinkFlapping", "PfcStorm"}), cooldown_s=600)
    assert not t.wants("RepresentorStale", "n1", 0.0)
    assert t.wants("LinkFlapping", "n1", 0.0)
    assert not any(t.wants("LinkFlapping", "n1", float(s)) for s in range(1, 600))
    assert t.wants("PfcStorm", "n1", 10.0)  # the cooldown is per code
    assert t.wants("LinkFlapping", "n2", 10.0)  # and per node
    assert t.wants("LinkFlapping", "n1", 600.0)


def test_no_codes_no_captures() -> None:
    t = CaptureTrigger()
    assert not t.wants("LinkFlapping", "n1", 0.0)
