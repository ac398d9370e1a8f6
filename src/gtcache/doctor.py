"""``gtcache doctor``: is gtcache active in this interpreter, and if not, why.

``diagnose()`` gathers, without compiling anything and without writing to the
store (a missing store is not created, nothing is created in one that exists: the
locking method is found with a shared ``flock`` on its layout file, ``_locking``):
the versions that matter and whether this gt4py is supported, whether the start-up
hook (``gtcache-autoload.pth``) is installed in this interpreter and did install the
gt4py hook, every ``GTCACHE_*`` setting in effect and where it came from, the store (path, layout
version, owner, mode, writability, free space, locking method, index, read-only
tiers, the folders whose owner or mode lookups refuse) and the toolchain facts that go
into keys. ``DoctorReport.problem`` is the one reason a model run would not be served from
the store, or None.

Importing gt4py is part of the diagnosis (it is what a model run does): with
``GTCACHE_DIR`` set, the start-up hook installs the gt4py hook in this process too.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import pathlib
import pwd
import re
import shutil
import site
import stat
import sys
import sysconfig
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gtcache import _env, settings as settings_module
from gtcache._version import __version__
from gtcache.errors import GtcacheError, StoreVersionError
from gtcache.settings import Settings

if TYPE_CHECKING:
    from gtcache.store import Store, TrustPolicy

__all__ = [
    "SUPPORTED_GT4PY", "DoctorReport", "RefusedReport", "SettingReport", "StoreReport", "TierReport", "diagnose",
]

#: The gt4py versions gtcache supports: from the first, below the second (pyproject.toml's
#: ``gt4py>=1.2.1,<1.3``; ``gtcache.gt4py._compat`` knows their differences).
SUPPORTED_GT4PY = ((1, 2, 1), (1, 3))
PTH = "gtcache-autoload.pth"

#: Settings read elsewhere than ``Settings`` (the size caps, the bundle key), for the table.
_OTHER_SETTINGS = (
    "GTCACHE_MAX_SIZE", "GTCACHE_MAX_FILES", "GTCACHE_BUNDLE_KEY", "GTCACHE_BUNDLE_REQUIRE_SIGNED",
    "GTCACHE_TRUSTED_USERS", "GTCACHE_TRUSTED_GROUPS", "GTCACHE_REMOTE_TOKEN", "GTCACHE_REMOTE_USER",
    "GTCACHE_REMOTE_PASSWORD", "GTCACHE_DEBUG",
)
#: The on/off switches (``_env.is_true``): any other word reads as off, which doctor reports.
_SWITCHES = (
    settings_module.ENV_SELF_CHECK, settings_module.ENV_EXPLAIN, settings_module.ENV_PROMOTE,
    settings_module.ENV_REPORT, "GTCACHE_DEBUG",
)
#: Never printed: their values are secrets.
_SECRET = ("GTCACHE_BUNDLE_KEY", "GTCACHE_REMOTE_TOKEN", "GTCACHE_REMOTE_PASSWORD")


@dataclasses.dataclass(frozen=True)
class SettingReport:
    name: str
    value: str
    #: "environment", "argument" (``--cache-dir``, ...), "default", or "environment
    #: (unknown)" for a ``GTCACHE_*`` variable gtcache does not read (a typo?).
    source: str


#: How many refused folders the report names (all are counted).
REFUSED_SHOWN = 5


@dataclasses.dataclass(frozen=True)
class RefusedFolderReport:
    path: pathlib.Path
    #: "shard" (``entries/<xx>``), "entry" (``entries/<xx>/<key>``) or "direct" (``direct/<xx>``).
    what: str
    #: Why lookups refuse it, as they say it (their warning names the same fix).
    reason: str


@dataclasses.dataclass(frozen=True)
class RefusedReport:
    """The folders of a store whose owner or mode makes lookups refuse what they hold
    (``Store.refused_folders``: the checks lookups make, one ``lstat`` per folder)."""

    #: How many folders lookups refuse.
    folders: int
    #: Entries never loaded because of them: each compiles again, on every run while its
    #: shard folder is refused (a new entry lands in the same folder).
    entries: int
    #: Direct links not followed because of them (a hit then lowers its program first).
    links: int
    #: The first few (``REFUSED_SHOWN``), in path order.
    first: tuple[RefusedFolderReport, ...]
    #: What to do: the advice of lookups' warning, then the alternative that keeps no mode.
    fix: str | None

    def summary(self, root: pathlib.Path) -> str:
        """One sentence: what is refused, what that costs, what to do."""
        lost = []
        if self.entries:
            lost.append(f"{_plural(self.entries, 'entry', 'entries')} compiled again instead of loaded")
        if self.links:
            lost.append(f"{_plural(self.links, 'direct link')} not followed")
        cost = f" ({', '.join(lost)})" if lost else ""
        return (
            f"Lookups refuse {_plural(self.folders, 'folder')} of the store '{root}' for their owner or mode{cost}:"
            f" {self.fix}."
        )


@dataclasses.dataclass(frozen=True)
class TierReport:
    path: pathlib.Path
    problem: str | None
    #: Its folders that lookups refuse (None: not looked at, the tier is not used).
    refused: RefusedReport | None = None


@dataclasses.dataclass(frozen=True)
class RemoteReport:
    #: The URL without password or options.
    name: str
    mode: str
    trusted: bool
    #: Why it is not used or does not answer (None: it answered).
    problem: str | None


@dataclasses.dataclass(frozen=True)
class StoreReport:
    path: pathlib.Path
    exists: bool
    layout_version: int | None
    owner: str | None
    mode: str | None
    writable: bool
    free_bytes: int | None
    #: What ``GTCACHE_LOCKING`` comes to on this file system ("flock" or "files"), None
    #: when the store is not writable, does not exist yet, or it could not be found out
    #: (a note says why). Found without writing to the store (``_locking``).
    locking: str | None
    index_dir: pathlib.Path
    tiers: tuple[TierReport, ...]
    #: Why the store cannot be opened (None: it can, or it can be created).
    problem: str | None
    #: What deserves a look but does not stop a run: not writable, owned by another user,
    #: writable by everyone, ... (checks of who may write the store add their findings here).
    notes: tuple[str, ...]
    #: Its folders that lookups refuse for their owner or mode (None: not looked at, the
    #: store could not be opened or does not exist).
    refused: RefusedReport | None = None
    #: The path as given (``GTCACHE_DIR``, ``--cache-dir``) when it is not ``path``, the
    #: resolved path where the store is used (``open_store`` resolves symlinks).
    given_path: pathlib.Path | None = None


@dataclasses.dataclass(frozen=True)
class DoctorReport:
    interpreter: str
    versions: Mapping[str, str | None]
    gt4py_supported: bool
    #: Why gt4py cannot be used (missing, unsupported version, its import failed).
    gt4py_problem: str | None
    #: The ``gtcache-autoload.pth`` files in this interpreter's site-packages.
    startup_hook: tuple[pathlib.Path, ...]
    #: Whether the environment turns the start-up hook on (``GTCACHE_DIR`` set or ``GTCACHE=1``).
    enabled: bool
    #: Whether the gt4py hook is installed in this process (after importing gt4py).
    hook_active: bool
    #: What the start-up hook warned while gt4py was imported.
    hook_warnings: tuple[str, ...]
    settings: tuple[SettingReport, ...]
    store: StoreReport
    toolchain: Mapping[str, Any]
    #: Per GPU kind whose toolkit is installed or whose arch is known ("cuda", "rocm"): the
    #: facts a GPU variant is keyed on here (device type, arch and where it came from, the
    #: toolkit's driver) and the toolkit's version.
    gpu: Mapping[str, Mapping[str, Any]]
    #: The one reason a model run in this interpreter would not be served from the store.
    problem: str | None
    #: Each ``GTCACHE_REMOTE`` URL and whether it answered (a ping, with its timeouts).
    remotes: tuple[RemoteReport, ...] = ()
    #: gt4py settings under which a miss can be stored under a key that does not describe its
    #: build (docs/keys.md, Known gaps): what each does. They do not stop a run.
    gt4py_notes: tuple[str, ...] = ()

    @property
    def verdict(self) -> str:
        if self.problem is not None:
            return self.problem
        if not self.enabled:
            return "gtcache is off here: GTCACHE_DIR is not set (set it to serve model runs from a store)."
        return f"gtcache is active: model runs in this interpreter are served from '{self.store.path}'."

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(json.dumps(dataclasses.asdict(self), default=str))
        data["verdict"] = self.verdict
        return data


def diagnose(
    settings: Settings | None = None, *, env: Mapping[str, str] | None = None, import_gt4py: bool = True
) -> DoctorReport:
    """Everything ``gtcache doctor`` shows. ``settings``: the store to look at (default: the
    environment's); ``env``: the environment a model run would see (default: ``os.environ``)."""
    env = os.environ if env is None else env
    problems: list[str] = []
    try:
        env_settings: Settings | None = Settings.from_env(env=env)
    except GtcacheError as error:
        env_settings = None
        problems.append(f"The start-up hook cannot read its settings: {error}")
    settings = settings or env_settings or Settings.from_env(env={})
    enabled = env_settings.enabled if env_settings is not None else _env.hook_enabled(env)

    versions = {name: _version(name) for name in ("gtcache", "gt4py", "dace", "numpy")}
    versions["gtcache"] = __version__
    versions["python"] = sys.version.split()[0]
    gt4py_problem = _gt4py_problem(versions["gt4py"])
    startup_hook = _startup_hooks()
    hook_active = False
    hook_warnings: tuple[str, ...] = ()
    if import_gt4py and gt4py_problem is None:
        hook_active, hook_warnings, import_problem = _import_gt4py()
        gt4py_problem = import_problem

    store = _store_report(settings)
    if enabled or env.get(settings_module.ENV_CACHE_DIR):
        if (value := env.get(settings_module.ENV_ENABLE, "")).strip().lower() in ("0", "false", "no", "off"):
            problems.append(f"GTCACHE={value} turns the start-up hook off although GTCACHE_DIR is set.")
        if not startup_hook:
            problems.append(
                f"The start-up hook '{PTH}' is not installed in this interpreter ('{sys.executable}'):"
                " reinstall gtcache in this environment."
            )
        if gt4py_problem is not None:
            problems.append(gt4py_problem)
        if store.problem is not None:
            problems.append(store.problem)
        if store.refused is not None and store.refused.folders:
            problems.append(store.refused.summary(store.path))
        if not problems and import_gt4py and not hook_active:
            reason = f": {hook_warnings[0]}" if hook_warnings else ""
            problems.append(f"The start-up hook did not install the gt4py hook in this interpreter{reason}")
    for name in _SWITCHES:  # (read as off: a typo of "1" would silently turn it off)
        if (given := env.get(name)) is not None and _env.word(given) not in _env.TRUE + _env.FALSE:
            problems.append(
                f"{name}={given!r} is neither on ({', '.join(_env.TRUE)}) nor off"
                f" ({', '.join(_env.FALSE[1:])}): gtcache reads it as off."
            )
    problem = problems[0] if problems else None

    return DoctorReport(
        interpreter=sys.executable,
        versions=versions,
        gt4py_supported=gt4py_problem is None,
        gt4py_problem=gt4py_problem,
        startup_hook=startup_hook,
        enabled=enabled,
        hook_active=hook_active,
        hook_warnings=hook_warnings,
        settings=_settings_report(settings, env),
        store=store,
        toolchain=_toolchain(),
        gpu=_gpu(),
        problem=problem,
        remotes=_remotes(settings),
        gt4py_notes=_gt4py_notes(env),
    )


# -- parts ------------------------------------------------------------------------------------


def _gt4py_notes(env: Mapping[str, str]) -> tuple[str, ...]:
    """``DoctorReport.gt4py_notes``: read as gt4py reads them (``gt4py.next.config``)."""
    notes = []
    if env.get("GT4PY_BUILD_CACHE_LIFETIME", "").upper() == "PERSISTENT":
        notes.append(
            "GT4PY_BUILD_CACHE_LIFETIME=persistent: gt4py reuses the build folders and compile commands"
            " of earlier processes whatever their compiler, flags or library versions, and what it"
            " returns is stored under this process's key; leave it at 'session' (the store is the"
            " persistent cache)."
        )
    return tuple(notes)


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _gt4py_problem(version: str | None) -> str | None:
    if version is None:
        return "gt4py is not installed in this interpreter."
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    parsed = tuple(int(part or 0) for part in match.groups()) if match else ()
    low, high = SUPPORTED_GT4PY
    if not parsed or not low <= parsed < high:
        supported = f"{'.'.join(map(str, low))} to below {'.'.join(map(str, high))}"
        return f"gt4py {version} is not supported (gtcache {__version__} supports {supported})."
    return None


def _startup_hooks() -> tuple[pathlib.Path, ...]:
    folders = [*site.getsitepackages(), site.getusersitepackages(), sysconfig.get_paths()["purelib"]]
    found: list[pathlib.Path] = []
    for folder in folders:
        path = pathlib.Path(folder) / PTH
        if path.is_file() and path not in found:
            found.append(path)
    return tuple(found)


def _import_gt4py() -> tuple[bool, tuple[str, ...], str | None]:
    """Import gt4py as a model run does; whether the hook is then active, and what was warned."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            import gt4py.next  # noqa: F401

            from gtcache.gt4py import active_hook
        except Exception as error:  # a broken gt4py is a finding, not a crash
            return False, (), f"gt4py does not import: {error!r}."
    said = tuple(str(w.message) for w in caught if "gtcache" in str(w.message))
    return active_hook() is not None, said, None


def _settings_report(settings: Settings, env: Mapping[str, str]) -> tuple[SettingReport, ...]:
    fields = {
        settings_module.ENV_CACHE_DIR: str(settings.cache_dir),
        settings_module.ENV_INDEX_DIR: str(settings.index_dir or settings.cache_dir / "index"),
        settings_module.ENV_ENABLE: ("on" if settings.enabled else "off") + (
            " (GTCACHE_DIR is set)" if settings.enabled and settings_module.ENV_ENABLE not in env else ""),
        settings_module.ENV_SELF_CHECK: _on(settings.self_check),
        settings_module.ENV_EXPLAIN: _on(settings.explain),
        settings_module.ENV_READONLY_DIRS: os.pathsep.join(map(str, settings.readonly_dirs)) or "(none)",
        settings_module.ENV_PROMOTE: _on(settings.promote),
        settings_module.ENV_LOCKING: settings.locking,
        settings_module.ENV_WAIT: f"{settings.wait:g}",
        settings_module.ENV_LOG: settings.log_level or "(logging untouched)",
        settings_module.ENV_REPORT: _on(settings.report),
        settings_module.ENV_CUDA_ARCH: settings.cuda_arch or "(unset: cupy's device, else CUDAARCHS)",
        settings_module.ENV_HIP_ARCH: settings.hip_arch or "(unset: cupy's device, else HIPARCHS)",
        settings_module.ENV_REMOTE: " ".join(_redact(url) for url in settings.remotes)
        or ("(set empty: no remote)" if settings.remotes_given else "(none, or the store's gtcache.toml [remote])"),
    }
    for name in _OTHER_SETTINGS:
        limit = name in ("GTCACHE_MAX_SIZE", "GTCACHE_MAX_FILES")
        fields[name] = env.get(name) or ("(none, or the store's gtcache.toml)" if limit else "(unset)")
    reports = []
    for name, value in fields.items():
        if name in env:
            source = "environment"
            value = "(set)" if name in _SECRET else value
        elif name in (settings_module.ENV_CACHE_DIR, settings_module.ENV_INDEX_DIR) and _is_argument(
            name, settings
        ):
            source = "argument"
        else:
            source = "default"
        reports.append(SettingReport(name, value, source))
    known = set(fields)
    for name in sorted(env):
        if name.startswith("GTCACHE") and name not in known:
            reports.append(SettingReport(name, env[name], "environment (unknown)"))
    return tuple(reports)


def _is_argument(name: str, settings: Settings) -> bool:
    default = Settings.from_env(env={})
    if name == settings_module.ENV_CACHE_DIR:
        return settings.cache_dir != default.cache_dir
    return settings.index_dir is not None


def _on(flag: bool) -> str:
    return "on" if flag else "off"


def _store_report(settings: Settings) -> StoreReport:
    from gtcache.store import LAYOUT_VERSION, open_store, resolve_store_path

    root = resolve_store_path(settings.cache_dir)  # where it is used, as 'ls' shows it
    exists = root.is_dir()
    owner = mode = None
    notes: list[str] = []
    problem: str | None = None
    layout_version: int | None = None
    locking: str | None = None
    writable = False
    refused: RefusedReport | None = None
    if exists:
        info = root.stat()
        owner = _user(info.st_uid)
        mode = f"{stat.filemode(info.st_mode)} ({info.st_mode & 0o7777:04o})"
        notes.extend(_ownership_notes(info))
        try:
            store = open_store(root, index_dir=settings.index_dir, create=False, trust=_trust(settings))
        except StoreVersionError as error:
            layout_version = error.found if isinstance(error.found, int) else None
            problem = f"The store '{root}' cannot be opened: {error}"
        except (GtcacheError, OSError) as error:
            if _empty(root):
                notes.append("An empty folder: the first compilation makes it a store.")
                writable = os.access(root, os.W_OK | os.X_OK)
            else:
                problem = f"The store '{root}' cannot be opened: {error}"
        else:
            layout_version = LAYOUT_VERSION
            writable = not store.read_only
            refused = _refused(store)
            if writable and (unsafe := store.unsafe_problem()) is not None:
                notes.append(f"Nothing is written to the store (compiles are not stored): {unsafe}")
            elif writable:
                try:
                    locking = _locking(root, settings.locking)
                except OSError as error:
                    notes.append(f"Locking could not be checked: {error.strerror or error}.")
            else:
                notes.append("Not writable by you: hits are served, misses compile but are not stored.")
            store.close()
    else:
        parent = _existing_parent(root)
        writable = parent is not None and os.access(parent, os.W_OK | os.X_OK)
        if root.exists():
            problem = f"'{root}' is not a folder."
        elif not writable:
            problem = f"The store '{root}' does not exist and cannot be created here ('{parent}' is not writable)."
        else:
            notes.append("Not created yet: the first compilation creates it.")
    usage_path = root if exists else _existing_parent(root)
    free = shutil.disk_usage(usage_path).free if usage_path is not None else None
    return StoreReport(
        path=root, exists=exists, layout_version=layout_version, owner=owner, mode=mode, writable=writable,
        free_bytes=free, locking=locking,
        index_dir=resolve_store_path(settings.index_dir) if settings.index_dir else root / "index",
        tiers=tuple(_tier(path, settings) for path in settings.readonly_dirs), problem=problem, notes=tuple(notes),
        refused=refused, given_path=settings.cache_dir if settings.cache_dir != root else None,
    )


#: The store's layout file (``cache_schema/v1/layout.md``): in every store, never removed.
_LAYOUT_FILE = "gtcache-layout.json"


def _locking(root: pathlib.Path, method: str) -> str:
    """What ``GTCACHE_LOCKING=method`` comes to in the store at ``root``: "flock" or "files".

    Without writing to the store: a model run's first lock makes ``locks/`` and tries ``flock``
    on a probe file it creates there and removes; doctor instead takes a shared ``flock`` on
    the layout file, opened read-only (never through a symlink), and lets it go at once
    (``flock_works``): a file system answers both alike. ``OSError`` when the layout file
    cannot be opened.
    """
    if method != "auto":
        return method
    from gtcache.store import flock_works, open_regular

    fd, _ = open_regular(root / _LAYOUT_FILE)
    try:
        return "flock" if flock_works(fd) else "files"
    finally:
        os.close(fd)


def _trust(settings: Settings) -> TrustPolicy:
    """The trust a model run with these settings has (``GTCACHE_TRUSTED_USERS`` / ``_GROUPS``)."""
    from gtcache.store import TrustPolicy

    return TrustPolicy.from_ids(settings.trusted_users, settings.trusted_groups)


def _refused(store: Store) -> RefusedReport:
    """``store.refused_folders()`` counted, the first few kept, and the fix lookups' warning names."""
    folders = entries = links = 0
    first: list[RefusedFolderReport] = []
    advice: list[str] = []
    for found in store.refused_folders():
        folders += 1
        if found.what == "direct":
            links += found.refused or 0
        else:
            entries += found.refused or 0
        if len(first) < REFUSED_SHOWN:
            first.append(RefusedFolderReport(found.path, found.what, found.problem))
        # The advice is what follows the reason in lookups' wording ("..., so it is not loaded; run
        # 'chmod -R go-w <store>', ..."); a folder that is a symlink has none: verify --repair removes it.
        said = found.problem.partition(", so it is not loaded; ")[2] or "run 'gtcache verify --repair'"
        if said not in advice:
            advice.append(said)
    if not folders:
        return RefusedReport(0, 0, 0, (), None)
    if "run 'gtcache verify --repair'" not in advice:
        advice.append(
            "or, if someone you do not trust may have written in them, run 'gtcache verify --repair': it moves"
            " their entries to quarantine/ (they compile again) and removes the emptied shard folders, changing"
            " no mode"
        )
    return RefusedReport(folders, entries, links, tuple(first), "; ".join(advice))


def _remotes(settings: Settings) -> tuple[RemoteReport, ...]:
    """Each remote, pinged once (a remote that is down costs its connect timeout here)."""
    from gtcache.policies.config import FILE_SOURCE, remote_urls
    from gtcache.remote import RemoteError, open_remote

    try:
        urls, source = remote_urls(settings)  # the file only if it and the store pass the trust check
    except GtcacheError as error:
        return (RemoteReport("gtcache.toml [remote]", "?", False, f"Not used: {error}"),)
    if not urls:
        return ()
    try:
        settings.bundle_trust()
    except GtcacheError as error:
        return tuple(RemoteReport(_redact(url), "?", False, f"Not used: {error}") for url in urls)
    reports = []
    for url in urls:
        try:
            remote = open_remote(url, settings, from_file=source == FILE_SOURCE)
        except RemoteError as error:
            reports.append(RemoteReport(_redact(url), "?", False, f"Not used: {error}"))
            continue
        problem = remote.problem()
        if problem is not None:
            problem = f"Not used: {problem}."
        else:
            try:
                remote.ping()
            except GtcacheError as error:
                problem = f"Does not answer: {error}"
            finally:
                remote.close()
        reports.append(RemoteReport(remote.name, remote.spec.mode, remote.spec.trusted, problem))
    return tuple(reports)


def _redact(url: str) -> str:
    from gtcache.remote import redact

    return redact(url)


def _ownership_notes(info: os.stat_result) -> list[str]:
    notes = []
    if info.st_uid != os.getuid():
        notes.append(f"Owned by '{_user(info.st_uid)}', not by you: its entries are code this process loads.")
    if info.st_mode & stat.S_IWOTH:
        notes.append("Writable by every user: anyone can add code that model runs load.")
    return notes


def _tier(path: pathlib.Path, settings: Settings) -> TierReport:
    from gtcache.store import open_store

    try:
        tier = open_store(path, read_only=True, trust=_trust(settings))
    except (GtcacheError, OSError) as error:
        return TierReport(path, f"Not used: {error}")
    try:
        return TierReport(path, None, _refused(tier))
    finally:
        tier.close()


def _empty(path: pathlib.Path) -> bool:
    try:
        return not any(path.iterdir())
    except OSError:
        return False


def _existing_parent(path: pathlib.Path) -> pathlib.Path | None:
    for parent in (path, *path.parents):
        if parent.is_dir():
            return parent
    return None


def _plural(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else (many or one + 's')}"


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _toolchain() -> dict[str, Any]:
    from gtcache.toolchain import current_facts

    try:
        return dict(current_facts())
    except Exception as error:  # a fact that cannot be read is shown, not raised
        return {"error": repr(error)}


def _gpu() -> dict[str, dict[str, Any]]:
    from gtcache import toolchain

    found: dict[str, dict[str, Any]] = {}
    for kind, device in (("cuda", "CUDA"), ("rocm", "ROCM")):
        try:
            driver, _, path = toolchain.toolkit_driver(kind)
            arch, source = toolchain.device_arch_source(device)
            if path is None and source == "no device, no declaration":
                continue
            found[kind] = {
                "device": device,
                "arch": arch,
                "arch_from": source,
                **{f"toolchain.{name}": value for name, value in toolchain.gpu_toolkit_facts(device).items()},
                "toolkit_version": toolchain.toolkit_version(kind) if path else None,
            }
        except Exception as error:  # a fact that cannot be read is shown, not raised
            found[kind] = {"error": repr(error)}
    return found
