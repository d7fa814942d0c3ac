"""fsutil.remove_tree_at: a whole directory removed relative to a directory fd, links not followed."""

from __future__ import annotations

import os

import pytest

from anec.fsutil import remove_tree_at


def test_a_tree_is_removed_and_a_link_in_it_is_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("precious")
    run = tmp_path / "run"
    tree = run / ".state.anec-tmp-x" / "deep" / "deeper"
    tree.mkdir(parents=True)
    (tree / "f.bin").write_bytes(b"x" * 10)
    (run / ".state.anec-tmp-x" / "link").symlink_to(outside, target_is_directory=True)
    (run / "plain.tmp").write_text("t")
    (run / "dangling").symlink_to(tmp_path / "nowhere")
    fd = os.open(run, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in (".state.anec-tmp-x", "plain.tmp", "dangling"):
            remove_tree_at(fd, name)
        with pytest.raises(FileNotFoundError):
            remove_tree_at(fd, "absent")
    finally:
        os.close(fd)
    assert sorted(os.listdir(run)) == []
    assert (outside / "keep.txt").read_text() == "precious"


def test_a_link_to_a_directory_is_removed_itself(tmp_path):
    target = tmp_path / "target"
    (target / "sub").mkdir(parents=True)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "ln").symlink_to(target, target_is_directory=True)
    fd = os.open(tmp_path / "d", os.O_RDONLY | os.O_DIRECTORY)
    try:
        remove_tree_at(fd, "ln")
    finally:
        os.close(fd)
    assert not (tmp_path / "d" / "ln").is_symlink() and (target / "sub").is_dir()
