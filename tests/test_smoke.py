from jevkedro.registry import VIEWS


def test_ten_views_registered():
    assert len(VIEWS) == 10
