"""The docdrive command without a mount: init, app and store management, status, errors (one
sentence on stderr starting with "docdrive: ", the documented exit codes), config errors with a
line number, --home versus DOCDRIVE_HOME."""
import json
import re
import socket
import os

import pytest

from ddtest import NOTES_ID, SECRET_ID, STORE, Drive, docdrive_bin, run


def one_error(p, code=None):
    assert p.returncode != 0, p.stdout
    if code is not None:
        assert p.returncode == code, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("docdrive: "), p.stderr
    return lines[0]


@pytest.fixture
def home(base_dir, request):
    import re
    d = Drive(base_dir / ("cli-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:60]))
    d.base.mkdir(parents=True)
    return d


def test_init_layout_and_reinit(home):
    home.cli("init")
    assert (home.home / "config.yaml").is_file()
    assert oct((home.home / "secret.key").stat().st_mode & 0o777) == oct(0o600)
    msg = one_error(home.cli("init", check=False))
    assert str(home.home) in msg or "exists" in msg.lower()
    assert home.cli("init", "--if-missing").returncode == 0


def test_init_default_drive(home):
    home.cli("init", "--default")
    apps = json.loads(home.cli("app", "list", "--json").stdout)
    stores = json.loads(home.cli("store", "list", "--json").stdout)
    assert any(a["name"] == "Notes" and a["public"] for a in apps)
    assert any(s["display"] == "Archive" for s in stores)


def test_apps_and_stores(home):
    home.create()
    apps = {a["id"]: a for a in json.loads(home.cli("app", "list", "--json").stdout)}
    assert apps[NOTES_ID]["name"] == "Notes" and apps[NOTES_ID]["public"] is True
    assert apps[SECRET_ID]["public"] is False
    for app in (NOTES_ID, SECRET_ID):
        for f in ("Documents", "Data", "Inbox"):
            assert (home.home / "containers" / app / f).is_dir()
    stores = json.loads(home.cli("store", "list", "--json").stdout)
    assert stores == [{"name": STORE, "display": "Work", "cache": str(home.work_backing),
                       "remoteType": "folder", "remotePath": str(home.remote)}]
    assert home.work_backing.is_dir() and home.remote.is_dir()
    one_error(home.cli("app", "add", NOTES_ID, "--name", "Again", check=False))
    one_error(home.cli("store", "add", STORE, "--name", "Again", "--folder", str(home.remote), check=False))
    home.cli("app", "remove", SECRET_ID)
    home.cli("store", "remove", STORE)
    assert [a["id"] for a in json.loads(home.cli("app", "list", "--json").stdout)] == [NOTES_ID]
    assert json.loads(home.cli("store", "list", "--json").stdout) == []
    one_error(home.cli("app", "remove", "no.such.app", check=False))
    one_error(home.cli("store", "remove", "nosuch", check=False))
    text = home.cli("app", "list").stdout
    assert NOTES_ID in text and "Notes" in text


@pytest.mark.parametrize("args", [
    ["app", "add", "../evil", "--name", "Evil"],
    ["app", "add", "bad/id", "--name", "Bad"],
    ["app", "add", "", "--name", "Empty"],
    ["app", "add", "ok.id", "--name", ".hidden"],
    ["app", "add", "ok.id", "--name", "a/b"],
    ["app", "add", "ok.id", "--name", "x" * 256],
    ["store", "add", "Upper", "--name", "U", "--folder", "/tmp"],
    ["store", "add", "bad name", "--name", "B", "--folder", "/tmp"],
    ["store", "add", "..", "--name", "B", "--folder", "/tmp"],
])
def test_invalid_names_are_refused(home, args):
    home.cli("init")
    before = (home.home / "config.yaml").read_text()
    one_error(home.cli(*args, check=False), code=4)
    assert (home.home / "config.yaml").read_text() == before


def test_a_refused_store_name_says_what_a_store_name_is_made_of(home):
    home.cli("init")
    msg = one_error(home.cli("store", "add", "Shared", "--name", "Shared", "--folder", "/tmp", check=False), code=4)
    assert 'The store name "Shared" is not valid: it contains "S"' in msg, msg
    assert "lowercase letters, digits" in msg and "--name" in msg, msg


def test_display_name_clash_is_refused(home):
    home.create()
    p = home.cli("app", "add", "other.app", "--name", "Work", "--public", check=False)
    # two top-level folders with one name cannot both show
    one_error(p)


def test_not_initialized(home):
    for args in (["app", "list"], ["store", "list"], ["status"], ["mount", str(home.mnt)]):
        msg = one_error(home.cli(*args, check=False), code=3)
        assert "init" in msg
    assert not home.mnt.exists() or os.listdir(home.mnt) == []


@pytest.mark.parametrize("text,lines", [
    ("apps:\n  - id: \"a\"\n    name: [unclosed\n", (3, 4)),  # the parser stops at the end of file
    ("apps:\n  - id: \"a.b\"\n    name: \"A\"\n    public: maybe\n", (4,)),
    ("apps: 12\n", (1,)),
    ("stores:\n  - name: \"s\"\n    display: \"S\"\n    remote:\n      type: ftp\n", (5,)),
    ("apps:\n\tbad: tab\n", (2,)),
])
def test_malformed_config_names_file_and_line(home, text, lines):
    home.cli("init")
    (home.home / "config.yaml").write_text(text)
    for args in (["app", "list"], ["status"], ["mount", str(home.mnt)]):
        msg = one_error(home.cli(*args, check=False), code=4)
        assert "config.yaml" in msg and any(f"line {n}" in msg for n in lines), msg
    assert not (home.home / "run" / "mount.json").exists()


def test_home_option_and_environment(home, base_dir):
    other = base_dir / f"{home.base.name}-other"
    run([docdrive_bin(), "init", "--home", str(other)], timeout=30)
    run([docdrive_bin(), "app", "add", "x.y", "--name", "XY", "--home", str(other)], timeout=30)
    env = dict(os.environ, DOCDRIVE_HOME=str(other))
    apps = json.loads(run([docdrive_bin(), "app", "list", "--json"], env=env, timeout=30).stdout)
    assert [a["id"] for a in apps] == ["x.y"]
    env["DOCDRIVE_HOME"] = str(home.home)
    home.cli("init")
    # --home wins over the environment
    apps = json.loads(run([docdrive_bin(), "app", "list", "--json", "--home", str(other)], env=env, timeout=30).stdout)
    assert [a["id"] for a in apps] == ["x.y"]
    s = json.loads(run([docdrive_bin(), "status", "--json"], env=env, timeout=30).stdout)
    assert s["home"] == str(home.home) and s["mounted"] is False


def test_unmount_of_something_not_mounted(home):
    home.cli("init")
    home.mnt.mkdir()
    one_error(home.cli("unmount", str(home.mnt), check=False), code=6)
    one_error(home.cli("unmount", "/", check=False), code=6)


def test_usage_errors_and_help(home):
    p = run([docdrive_bin(), "--help"], timeout=30)
    for cmd in ("init", "app", "store", "mount", "unmount", "status"):
        assert cmd in p.stdout
    p = run([docdrive_bin(), "no-such-command"], timeout=30, check=False)
    assert p.returncode == 64
    p = run([docdrive_bin(), "app", "add"], timeout=30, check=False)
    assert p.returncode == 64
    # A timeout that is no number of seconds is a usage error, not a crash.
    for bad in ("inf", "nan", "-1", "0"):
        p = home.cli("sync", f"--timeout={bad}", check=False)
        assert p.returncode == 64 and "--timeout must be" in p.stderr, (bad, p.returncode, p.stderr)


def test_every_drive_is_a_device_with_its_own_id_and_a_name(new_drive):
    """`init` makes a random device id and takes the host name unless --device-name is given;
    two drives never share an id (the temp files they put on a shared remote carry it)."""
    a, b = new_drive(), new_drive()
    da, db = (json.loads(d.cli("status", "--json").stdout)["device"] for d in (a, b))
    assert re.fullmatch(r"[0-9a-f]{32}", da["id"]) and re.fullmatch(r"[0-9a-f]{32}", db["id"])
    assert da["id"] != db["id"]
    assert da["name"] == socket.gethostname()
    # the id stays; a drive made with a device name shows it
    assert json.loads(a.cli("status", "--json").stdout)["device"] == da
    home = a.base / "named"
    p = run([a.bin, "init", "--device-name", "work laptop"], env={**os.environ, "DOCDRIVE_HOME": str(home)})
    assert p.returncode == 0, p.stderr
    named = json.loads(run([a.bin, "status", "--json"], env={**os.environ, "DOCDRIVE_HOME": str(home)}).stdout)["device"]
    assert named["name"] == "work laptop"
    assert "Device:  work laptop" in run([a.bin, "status"], env={**os.environ, "DOCDRIVE_HOME": str(home)}).stdout
    bad = run([a.bin, "init", "--device-name", "a/b"], env={**os.environ, "DOCDRIVE_HOME": str(a.base / "bad")}, check=False)
    assert bad.returncode == 4 and bad.stderr.count("\n") == 1 and "cannot name a device" in bad.stderr, bad.stderr


def test_bash_completion_offers_the_subcommands(tmp_path):
    """The script mount.sh installs for bash completes docdrive's subcommands and their options."""
    script = tmp_path / "docdrive.bash"
    script.write_text(run([docdrive_bin(), "--generate-completion-script", "bash"]).stdout)

    def complete(line: str) -> set[str]:
        words = line.split(" ")
        code = (f'source {script}; COMP_WORDS=({" ".join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}; '
                f'COMP_LINE="{line}"; COMP_POINT={len(line)}; _docdrive; printf "%s\\n" "${{COMPREPLY[@]}}"')
        return set(run(["bash", "-c", code]).stdout.split())

    assert {"status", "store", "service", "mount", "sync"} <= complete("docdrive s")
    assert {"install", "uninstall"} <= complete("docdrive service ")
    assert {"--json", "--watch", "--home"} <= complete("docdrive status ")
