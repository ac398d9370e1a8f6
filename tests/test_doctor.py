"""gtcache doctor: is gtcache active here, and if not, why (real interpreters, real stores)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import sysconfig

import pytest

import gtcache
from gtcache import doctor
from gtcache.settings import Settings
from tests.helpers import publish

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _doctor(
    tmp_path: pathlib.Path, *args: str, before: tuple[str, ...] = (), **env: str
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GTCACHE")}
    return subprocess.run(
        [sys.executable, "-m", "gtcache_cli", *before, "doctor", *args], capture_output=True, text=True, cwd=tmp_path,
        env={**base, **env}, timeout=300, check=False,
    )


def test_active_store_reports_everything_and_exits_0(tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "store")
    proc = _doctor(tmp_path, "--json", GTCACHE_DIR=str(store.root), GTCACHE_WAIT="5", GTCACHE_TYPO="1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["problem"] is None and report["hook_active"] and report["gt4py_supported"]
    assert report["verdict"] == f"gtcache is active: model runs in this interpreter are served from '{store.root}'."
    assert report["versions"]["gtcache"] == gtcache.__version__ and report["versions"]["gt4py"]
    assert any(path.endswith("gtcache-autoload.pth") for path in report["startup_hook"])
    settings = {s["name"]: (s["value"], s["source"]) for s in report["settings"]}
    assert settings["GTCACHE_DIR"] == (str(store.root), "environment")
    assert settings["GTCACHE_WAIT"] == ("5", "environment")
    assert settings["GTCACHE_LOCKING"] == ("auto", "default")
    assert settings["GTCACHE_TYPO"] == ("1", "environment (unknown)")
    info = report["store"]
    assert info["exists"] and info["writable"] and info["layout_version"] == 1
    assert info["owner"] == "root" and info["mode"].startswith("drwx")
    assert info["locking"] in ("flock", "files") and info["free_bytes"] > 0
    assert report["toolchain"]["gt4py"] == report["versions"]["gt4py"]


def test_every_documented_variable_is_known_not_a_typo(tmp_path: pathlib.Path) -> None:
    """Every ``GTCACHE_*`` variable configuration.md documents (and the CLI's GTCACHE_DEBUG) is a
    setting doctor shows as read, never "environment (unknown)", which says gtcache does not read
    it (a typo?): GTCACHE_TRUSTED_USERS, _GROUPS, GTCACHE_BUNDLE_REQUIRE_SIGNED and GTCACHE_DEBUG
    were."""
    table = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `(GTCACHE_[A-Z_]+)`", table, flags=re.MULTILINE))
    documented |= set(re.findall(r"^\| `GTCACHE_[A-Z_]+`, `(GTCACHE_[A-Z_]+)`", table, flags=re.MULTILINE))
    documented |= {"GTCACHE_DEBUG"}
    assert {"GTCACHE_TRUSTED_USERS", "GTCACHE_BUNDLE_REQUIRE_SIGNED", "GTCACHE_REMOTE_PASSWORD"} <= documented
    env = dict.fromkeys(documented, "1") | {"GTCACHE_DIR": str(tmp_path / "store"), "GTCACHE_TYPO": "1"}
    sources = {r.name: r.source for r in doctor._settings_report(Settings.from_env(env={}), env)}
    assert sources.keys() >= documented
    assert {name for name, source in sources.items() if source == "environment (unknown)"} == {"GTCACHE_TYPO"}


def test_text_output_ends_with_the_verdict(tmp_path: pathlib.Path) -> None:
    proc = _doctor(tmp_path, GTCACHE_DIR=str(tmp_path / "new-store"))
    assert proc.returncode == 0, proc.stderr
    assert "Not created yet: the first compilation creates it." in proc.stdout
    assert not (tmp_path / "new-store").exists(), "doctor creates nothing"
    assert proc.stdout.strip().splitlines()[-1].startswith("gtcache is active")


@pytest.mark.parametrize("lifetime", ["persistent", pytest.param("session", marks=pytest.mark.slow)])
def test_gt4py_persistent_build_cache_is_noted(tmp_path: pathlib.Path, lifetime: str) -> None:
    """gt4py's persistent build cache reuses builds whatever the toolchain (keys.md, Known gaps): a
    note, not a reason to exit 1."""
    proc = _doctor(tmp_path, GTCACHE_DIR=str(tmp_path / "store"), GT4PY_BUILD_CACHE_LIFETIME=lifetime)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    noted = "note: GT4PY_BUILD_CACHE_LIFETIME=persistent: gt4py reuses the build folders" in proc.stdout
    assert noted is (lifetime == "persistent")
    report = json.loads(_doctor(tmp_path, "--json", GTCACHE_DIR=str(tmp_path / "store"),
                                GT4PY_BUILD_CACHE_LIFETIME=lifetime).stdout)
    assert len(report["gt4py_notes"]) == (lifetime == "persistent") and report["problem"] is None


def test_store_that_cannot_be_opened_exits_1_naming_it(tmp_path: pathlib.Path) -> None:
    folder = tmp_path / "not-a-store"
    folder.mkdir()
    (folder / "precious.txt").write_text("mine")
    proc = _doctor(tmp_path, GTCACHE_DIR=str(folder))
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert re.fullmatch(rf"Error: The store '{re.escape(str(folder))}' cannot be opened: .*", last), proc.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["precious.txt"]


@pytest.mark.parametrize("value", ["0", "off"])
def test_gtcache_0_with_gtcache_dir_exits_1(tmp_path: pathlib.Path, value: str) -> None:
    """The reason names GTCACHE as set, and the hook's line says GTCACHE turns it off: it said
    "not active (GTCACHE_DIR is not set)" with GTCACHE_DIR set, and "GTCACHE=0" for GTCACHE=off."""
    proc = _doctor(tmp_path, GTCACHE_DIR=str(tmp_path / "s"), GTCACHE=value)
    assert proc.returncode == 1
    assert proc.stderr.strip().endswith(f"Error: GTCACHE={value} turns the start-up hook off although GTCACHE_DIR is set.")
    assert "gt4py hook:    not active (GTCACHE turns it off)" in proc.stdout
    assert "GTCACHE_DIR is not set" not in proc.stdout


@pytest.mark.parametrize("name", ["GTCACHE_SELF_CHECK", "GTCACHE_REPORT", "GTCACHE_DEBUG"])
def test_a_switch_that_is_neither_on_nor_off_is_a_problem(tmp_path: pathlib.Path, name: str) -> None:
    """A switch reads any other word as off: 'maybe' (or a typo of 'yes') silently ran without it."""
    store = gtcache.open_store(tmp_path / "store")
    env = {"GTCACHE_DIR": str(store.root), name: "maybe", "GTCACHE_PROMOTE": "On", "GTCACHE_EXPLAIN": ""}
    report = doctor.diagnose(env=env, import_gt4py=False)
    assert report.problem == f"{name}='maybe' is neither on (1, true, yes, on) nor off (0, false, no, off): gtcache reads it as off."
    assert doctor.diagnose(env={**env, name: " No "}, import_gt4py=False).problem is None


def test_without_gtcache_dir_it_says_off_and_exits_0(tmp_path: pathlib.Path) -> None:
    proc = _doctor(tmp_path, before=("--cache-dir", str(tmp_path / "s")))
    assert proc.returncode == 0, proc.stderr
    assert "gtcache is off here: GTCACHE_DIR is not set" in proc.stdout
    assert re.search(r"GTCACHE_DIR\s+\S+/s\s+\[argument\]", proc.stdout), proc.stdout


def test_interpreter_without_the_startup_hook_exits_1(tmp_path: pathlib.Path) -> None:
    """A fresh environment that sees gtcache's sources (PYTHONPATH) but never installed it."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", tmp_path / "venv"], check=True)
    python = tmp_path / "venv" / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    (pathlib.Path(purelib) / "_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith("GTCACHE")}
    proc = subprocess.run(
        [python, "-m", "gtcache_cli", "doctor"], capture_output=True, text=True, cwd=tmp_path, timeout=300,
        env={**base, "GTCACHE_DIR": str(tmp_path / "s"), "PYTHONPATH": f"{ROOT / 'src'}:{ROOT / 'cli'}"},
        check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"Error: The start-up hook 'gtcache-autoload.pth' is not installed in this interpreter ('{python}'):"
        " reinstall gtcache in this environment."
    )


def test_bad_setting_is_the_reason(tmp_path: pathlib.Path) -> None:
    report = doctor.diagnose(
        Settings.from_env(env={"GTCACHE_DIR": str(tmp_path / "s")}),
        env={"GTCACHE_DIR": str(tmp_path / "s"), "GTCACHE_LOG": "loud"}, import_gt4py=False,
    )
    assert report.problem is not None and "GTCACHE_LOG='loud' is not one of" in report.problem


def test_unsupported_gt4py_versions() -> None:
    assert doctor._gt4py_problem("1.2.1") is None and doctor._gt4py_problem("1.2.3") is None
    assert doctor._gt4py_problem("1.2.3.post1+g1234") is None
    assert doctor._gt4py_problem("1.3.0") == (
        f"gt4py 1.3.0 is not supported (gtcache {gtcache.__version__} supports 1.2.1 to below 1.3)."
    )
    assert doctor._gt4py_problem("1.2.0") is not None and doctor._gt4py_problem(None) is not None


def test_supported_range_matches_the_package_requirement() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert '"gt4py>=1.2.1,<1.3"' in text, "doctor.SUPPORTED_GT4PY follows pyproject.toml's gt4py requirement"
    assert doctor.SUPPORTED_GT4PY == ((1, 2, 1), (1, 3))


def test_store_owned_by_another_user_and_writable_by_all_is_noted(tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "store")
    os.chown(store.root, 65534, 65534)
    store.root.chmod(0o777)
    report = doctor.diagnose(Settings.from_env(cache_dir=store.root, env={}), env={}, import_gt4py=False)
    assert report.store.owner == "nobody" and report.store.mode == "drwxrwxrwx (0777)"
    assert any("Owned by 'nobody', not by you" in note for note in report.store.notes)
    assert any("Writable by every user" in note for note in report.store.notes)


@pytest.mark.parametrize("tier_exists", [True, False])
def test_read_only_tiers(tmp_path: pathlib.Path, tier_exists: bool) -> None:
    tier = tmp_path / "tier"
    if tier_exists:
        gtcache.open_store(tier)
    settings = Settings.from_env(env={"GTCACHE_DIR": str(tmp_path / "s"), "GTCACHE_READONLY_DIRS": str(tier)})
    report = doctor.diagnose(settings, env={}, import_gt4py=False)
    (reported,) = report.store.tiers
    assert reported.path == tier and (reported.problem is None) == tier_exists


# -- folders lookups refuse (a store made under umask 002) ------------------------------------------

#: A group the reader does not trust (tests run as root, whose private group would be trusted).
NOGROUP = 65534


def _group_writable(*folders: pathlib.Path) -> None:
    for folder in folders:
        os.chown(folder, 0, NOGROUP)
        os.chmod(folder, 0o775)


def test_folders_lookups_refuse_are_counted_named_and_make_doctor_exit_1(tmp_path: pathlib.Path) -> None:
    """Every shard and entry folder group-writable (a store made under umask 002): lookups refuse
    each entry (it compiles on every run); doctor says how many, names the first few with the
    reason and the fix lookups' warning gives, and exits 1. Declaring the group: exit 0."""
    store = gtcache.open_store(tmp_path / "store")
    keys = [publish(store, f"p{i}").key for i in range(12)]
    store.link_direct("ab" * 16, keys[0])
    _group_writable(*(p for top in ("entries", "direct") for p in (store.root / top).rglob("*") if p.is_dir()))
    shards = sorted({key[:2] for key in keys})
    link = tmp_path / "link"
    link.symlink_to(store.root)  # given through a symlink: the resolved path is shown, and what was given

    proc = _doctor(tmp_path, "--json", GTCACHE_DIR=str(link))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert (report["store"]["path"], report["store"]["given_path"]) == (str(store.root), str(link))
    refused = report["store"]["refused"]
    assert (refused["folders"], refused["entries"], refused["links"]) == (len(shards) + 1, 12, 1)
    assert [(f["path"], f["what"]) for f in refused["first"]] == [
        (str(store.root / "entries" / shard), "shard") for shard in shards[:5]
    ]
    assert all("is writable by group 'nogroup'" in f["reason"] for f in refused["first"])
    fix = f"run 'chmod -R go-w {store.root}', or set GTCACHE_TRUSTED_GROUPS if its group may write it"
    with pytest.raises(gtcache.CorruptEntryError) as caught:  # what lookups say (and their warning)
        gtcache.open_store(store.root).lookup(keys[0])
    assert fix in str(caught.value)
    assert refused["fix"].startswith(fix) and "'gtcache verify --repair'" in refused["fix"]
    assert report["problem"] == report["verdict"]
    assert report["problem"].startswith(
        f"Lookups refuse {len(shards) + 1} folders of the store '{store.root}' for their owner or mode"
        " (12 entries compiled again instead of loaded, 1 direct link not followed): " + fix
    ), report["problem"]

    text = _doctor(tmp_path, GTCACHE_DIR=str(link))
    assert text.returncode == 1
    assert text.stderr.strip().splitlines()[-1] == f"Error: {report['problem']}"
    assert f"Store:         {store.root}  (given as {link})" in text.stdout
    assert (f"folders lookups refuse (owner or mode): {len(shards) + 1} folders, 12 entries never loaded,"
            " 1 direct link not followed") in text.stdout
    assert f"    folder '{store.root / 'entries' / shards[0]}' is writable by group 'nogroup'" in text.stdout
    assert f"... and {len(shards) + 1 - 5} more" in text.stdout and f"  fix: {fix}" in text.stdout

    trusted = _doctor(tmp_path, "--json", GTCACHE_DIR=str(store.root), GTCACHE_TRUSTED_GROUPS="nogroup")
    assert trusted.returncode == 0, trusted.stdout + trusted.stderr
    data = json.loads(trusted.stdout)
    assert data["store"]["refused"] == {"folders": 0, "entries": 0, "links": 0, "first": [], "fix": None}
    assert data["store"]["given_path"] is None


@pytest.mark.parametrize("where", ["store", "tier"])
def test_a_refused_folder_fails_the_store_and_is_shown_for_a_tier(tmp_path: pathlib.Path, where: str) -> None:
    """As doctor treats a tier it cannot use: shown, but model runs go on without it (exit 0);
    the store's own refused folders are the reason (exit 1)."""
    main, tier = gtcache.open_store(tmp_path / "main"), gtcache.open_store(tmp_path / "tier")
    key = publish(main if where == "store" else tier).key
    shard = (main if where == "store" else tier).root / "entries" / key[:2]
    _group_writable(shard)
    env = {"GTCACHE_DIR": str(main.root), "GTCACHE_READONLY_DIRS": str(tier.root)}
    report = doctor.diagnose(Settings.from_env(env=env), env=env, import_gt4py=False)
    (tier_report,) = report.store.tiers
    assert report.store.refused is not None and tier_report.refused is not None
    refused, clean = (report.store.refused, tier_report.refused)[:: 1 if where == "store" else -1]
    assert (refused.folders, refused.entries, [f.path for f in refused.first]) == (1, 1, [shard])
    assert clean.folders == 0
    if where == "store":
        assert report.problem is not None and report.problem.startswith("Lookups refuse 1 folder of the store")
    else:
        assert report.problem is None and tier_report.problem is None


def test_a_facts_folder_others_can_write_is_the_store_opening_check(tmp_path: pathlib.Path) -> None:
    """``facts/`` is a fixed folder: checked when the store is opened, so doctor names it as a store
    that cannot be opened (no model run uses it), not among the refused folders."""
    store = gtcache.open_store(tmp_path / "store")
    (store.root / "facts").mkdir()
    _group_writable(store.root / "facts")
    env = {"GTCACHE_DIR": str(store.root)}
    report = doctor.diagnose(Settings.from_env(env=env), env=env, import_gt4py=False)
    assert report.store.refused is None
    assert report.problem is not None and f"'{store.root / 'facts'}' is writable by group 'nogroup'" in report.problem


def test_the_store_is_shown_where_it_is_used(tmp_path: pathlib.Path) -> None:
    """``open_store`` resolves symlinks and uses the store there (``ls`` and ``verify`` print that
    path): doctor shows it too, and the path as given beside it; the index folder likewise."""
    store = gtcache.open_store(tmp_path / "store")
    (tmp_path / "index").mkdir()
    (tmp_path / "link").symlink_to(store.root)
    (tmp_path / "index-link").symlink_to(tmp_path / "index")
    env = {"GTCACHE_DIR": str(tmp_path / "link"), "GTCACHE_INDEX_DIR": str(tmp_path / "index-link")}
    report = doctor.diagnose(Settings.from_env(env=env), env=env, import_gt4py=False)
    assert (report.store.path, report.store.given_path) == (store.root, tmp_path / "link")
    assert report.store.index_dir == tmp_path / "index"
    assert report.verdict == f"gtcache is active: model runs in this interpreter are served from '{store.root}'."
    env = {"GTCACHE_DIR": str(store.root)}
    assert doctor.diagnose(Settings.from_env(env=env), env=env, import_gt4py=False).store.given_path is None


# -- doctor writes nothing to the store ------------------------------------------------------------


def _tree(root: pathlib.Path) -> dict[str, tuple[int, int, int]]:
    """Every path under ``root`` (``root`` too, nothing followed): its mode, size and mtime (ns)."""
    found = {}
    for folder, folders, files in os.walk(root):
        for name in [".", *folders, *files]:
            path = pathlib.Path(folder, name)
            st = path.lstat()
            found[str(path.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return found


@pytest.mark.parametrize("locks", ["no locks folder yet", "locks folder"])
def test_doctor_writes_nothing_to_the_store(tmp_path: pathlib.Path, locks: str) -> None:
    """The real command on a store with entries, a ledger and facts: no file or folder appears,
    changes or goes, no folder's mtime moves (a probe file made and removed in ``locks/`` did:
    and ``locks/`` itself was made), and the locking method is still found."""
    store = gtcache.open_store(tmp_path / "store")
    publish(store, "kept")
    store.record_run({"counts": {"hit": 1}})
    if locks == "locks folder":
        lock = store.lock("compile")
        assert lock.acquire(0)
        lock.release()
        assert (store.root / "locks").is_dir()
    else:
        assert not (store.root / "locks").exists()
    before = _tree(store.root)
    proc = _doctor(tmp_path, "--json", GTCACHE_DIR=str(store.root))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["store"]["locking"] == "flock"
    assert _tree(store.root) == before


def test_locking_method_as_set_and_a_symlinked_locks_folder(tmp_path: pathlib.Path) -> None:
    """``GTCACHE_LOCKING=files`` is reported as set; a ``locks`` symlink (every write refuses) is
    a note, and nothing is created where it points."""
    store = gtcache.open_store(tmp_path / "store")
    env = {"GTCACHE_DIR": str(store.root), "GTCACHE_LOCKING": "files"}
    assert doctor.diagnose(Settings.from_env(env=env), env=env, import_gt4py=False).store.locking == "files"
    assert not (store.root / "locks").exists(), "doctor makes no locks/ folder"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (store.root / "locks").symlink_to(elsewhere, target_is_directory=True)
    env = {"GTCACHE_DIR": str(store.root)}
    report = doctor.diagnose(Settings.from_env(env=env), env=env, import_gt4py=False)
    assert report.store.locking is None
    assert any(
        note.startswith("Nothing is written to the store") and f"'{store.root / 'locks'}' is a symbolic link" in note
        for note in report.store.notes
    ), report.store.notes
    assert list(elsewhere.iterdir()) == []
