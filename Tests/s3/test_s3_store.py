"""`docdrive store add --s3`: the probe, the marker object, the config, and one sentence for a
wrong key, a missing bucket and an unreachable endpoint; boto3 (a client nobody here wrote)
reads what `store add` wrote. Credentials never reach the config or the output."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mount"))
import ddtest  # noqa: E402
from weed import ACCESS_KEY, SECRET_KEY  # noqa: E402


def docdrive(home: Path, env: dict, *args, check=True):
    p = subprocess.run([ddtest.docdrive_bin(), *args], env=dict(env, DOCDRIVE_HOME=str(home)),
                       capture_output=True, text=True, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"docdrive {' '.join(args)} exited {p.returncode}: {p.stderr}")
    return p


@pytest.fixture
def home(tmp_path, weed):
    h = tmp_path / "home"
    docdrive(h, weed.env(), "init")
    return h


def boto3_client(weed):
    try:
        import boto3  # noqa: F401
    except ImportError:
        venv = Path(__file__).resolve().parents[2] / ".venv-weed" / "bin" / "python"
        return None if not venv.exists() else str(venv)
    return "self"


def s3_get(weed, key: str) -> tuple[bytes, dict]:
    """The object's bytes and metadata, read with boto3 (in the weed venv when this python lacks it)."""
    code = ("import boto3,sys,json,base64;"
            "c=boto3.client('s3',endpoint_url=sys.argv[1],region_name='us-east-1');"
            "o=c.get_object(Bucket=sys.argv[2],Key=sys.argv[3]);"
            "print(json.dumps({'body':base64.b64encode(o['Body'].read()).decode(),'meta':o['Metadata']}))")
    py = boto3_client(weed)
    assert py is not None, "boto3 is not installed (mount-scripts/test.sh puts it in .venv-weed)"
    exe = sys.executable if py == "self" else py
    p = subprocess.run([exe, "-c", code, weed.endpoint, weed.bucket, key], env=weed.env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    import base64
    import json
    d = json.loads(p.stdout)
    return base64.b64decode(d["body"]), d["meta"]


def test_store_add_probes_writes_the_marker_and_keeps_no_secret(home, weed):
    p = docdrive(home, weed.env(), "store", "add", "team", "--name", "Team", "--s3", weed.endpoint,
                 "--bucket", weed.bucket, "--prefix", "stores/team", "--path-style")
    assert "S3 remote s3://docdrive-test/stores/team" in p.stdout
    body, _ = s3_get(weed, "stores/team/.docdrive-store")
    assert body == b"DocDrive store team\n"
    config = (home / "config.yaml").read_text()
    assert "type: s3" in config and "stores/team" in config
    assert SECRET_KEY not in config and ACCESS_KEY not in config
    listing = json.loads(docdrive(home, weed.env(), "store", "list", "--json").stdout)
    team = [s for s in listing if s["name"] == "team"][0]
    assert team["remoteType"] == "s3" and team["bucket"] == weed.bucket and team["prefix"] == "stores/team"
    assert SECRET_KEY not in json.dumps(listing)
    # The probe left nothing behind.
    keys = list_keys(weed, "stores/team/")
    assert "stores/team/.docdrive-store" in keys
    assert not [k for k in keys if "probe" in k]
    # A second device joins the same store: its marker is kept.
    other = home.parent / "other"
    docdrive(other, weed.env(), "init")
    docdrive(other, weed.env(), "store", "add", "team", "--name", "Team", "--s3", weed.endpoint,
             "--bucket", weed.bucket, "--prefix", "stores/team", "--path-style")


def test_an_endpoint_at_an_ip_address_or_localhost_puts_the_bucket_in_the_path_unasked(home, weed):
    # docs.127.0.0.1 cannot be resolved: without --path-style the bucket must go in the path by
    # itself (as the AWS CLI and rclone do), and the config keeps no path-style it was not given.
    p = docdrive(home, weed.env(), "store", "add", "ip", "--name", "IP", "--s3", weed.endpoint,
                 "--bucket", weed.bucket, "--prefix", "stores/ip", check=False)
    assert p.returncode == 0, p.stderr
    assert s3_get(weed, "stores/ip/.docdrive-store")[0] == b"DocDrive store ip\n"
    local = weed.endpoint.replace("127.0.0.1", "localhost")
    p = docdrive(home, weed.env(), "store", "add", "lh", "--name", "LH", "--s3", local,
                 "--bucket", weed.bucket, "--prefix", "stores/lh", check=False)
    assert p.returncode == 0, p.stderr
    assert s3_get(weed, "stores/lh/.docdrive-store")[0] == b"DocDrive store lh\n"
    lines = [l for l in (home / "config.yaml").read_text().splitlines() if not l.lstrip().startswith("#")]
    assert "type: s3" in "\n".join(lines) and not [l for l in lines if "path-style" in l], lines


def list_keys(weed, prefix):
    p = subprocess.run(["curl", "-sf", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", f"{ACCESS_KEY}:{SECRET_KEY}",
                        f"{weed.endpoint}/{weed.bucket}?list-type=2&prefix={urllib.parse.quote(prefix, safe='')}"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0
    import re
    return re.findall(r"<Key>([^<]*)</Key>", p.stdout)


def one_sentence(text: str) -> str:
    lines = [l for l in text.strip().splitlines() if l.strip()]
    assert len(lines) == 1, text
    assert lines[0].startswith("docdrive: ") and lines[0].endswith("."), text
    return lines[0]


def test_a_wrong_secret_key_is_one_sentence_without_the_key(home, weed):
    env = dict(weed.env(), AWS_SECRET_ACCESS_KEY="wrong-secret-value-123")
    p = docdrive(home, env, "store", "add", "team", "--name", "Team", "--s3", weed.endpoint, "--bucket", weed.bucket,
                 "--path-style", check=False)
    assert p.returncode != 0
    line = one_sentence(p.stderr)
    assert "refused the secret key" in line
    assert "wrong-secret-value-123" not in p.stderr + p.stdout and ACCESS_KEY not in p.stderr
    assert "team" not in (home / "config.yaml").read_text().split("stores:")[1]


def test_a_missing_bucket_and_an_unreachable_endpoint_are_one_sentence_each(home, weed):
    p = docdrive(home, weed.env(), "store", "add", "team", "--name", "Team", "--s3", weed.endpoint, "--bucket", "no-such-bucket-here",
                 "--path-style", check=False)
    assert p.returncode != 0
    assert "The bucket no-such-bucket-here does not exist" in one_sentence(p.stderr)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    p = docdrive(home, weed.env(), "store", "add", "team", "--name", "Team", "--s3", f"http://127.0.0.1:{port}", "--bucket", weed.bucket,
                 "--path-style", check=False)
    assert p.returncode != 0
    assert "cannot be reached" in one_sentence(p.stderr)


def test_a_credentials_file_others_can_read_is_refused(home, weed, tmp_path):
    creds = tmp_path / "creds"
    creds.write_text(f"[default]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n")
    env = {k: v for k, v in weed.env().items() if not k.startswith("AWS_")}
    creds.chmod(0o644)
    p = docdrive(home, env, "store", "add", "team", "--name", "Team", "--s3", weed.endpoint, "--bucket", weed.bucket,
                 "--path-style", "--credentials-file", str(creds), check=False)
    assert p.returncode != 0 and "chmod 600" in one_sentence(p.stderr)
    creds.chmod(0o600)
    docdrive(home, env, "store", "add", "team", "--name", "Team", "--s3", weed.endpoint, "--bucket", weed.bucket,
             "--prefix", "withfile", "--path-style", "--credentials-file", str(creds))
    assert f'credentials-file: "{creds}"' in (home / "config.yaml").read_text()


def test_what_docdrive_uploads_is_plain_s3_that_boto3_reads_byte_for_byte(weed, tmp_path):
    # Given a folder with an ordinary name, a name with spaces and accents, a Latin-1 name (not
    # UTF-8) and a file larger than the part size,
    src = tmp_path / "src"
    (src / "Reports").mkdir(parents=True)
    files = {
        b"Reports/q3.odt": os.urandom(70_000),
        "Reports/Été final 100%.txt".encode(): b"accents\n",
        b"caf\xe9.txt": b"latin-1 name\n",
        b"big.bin": os.urandom(12 << 20),
    }
    for rel, data in files.items():
        (src / os.fsdecode(rel)).write_bytes(data)
    # when DocDrive's S3 remote uploads them (5 MiB parts: the big one goes in 3),
    p = subprocess.run([ddtest.docdrive_bin(), "internal", "s3-copy", "--endpoint", weed.endpoint, "--bucket", weed.bucket,
                        "--prefix", "interop", "--path-style", "--part-size", str(5 << 20), str(src)],
                       env=weed.env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["files"] == 4
    # then every object holds exactly the file's bytes, at the key the README promises.
    keys = {b"Reports/q3.odt": "interop/Reports/q3.odt",
            "Reports/Été final 100%.txt".encode(): "interop/Reports/Été final 100%.txt",
            b"caf\xe9.txt": "interop/~dd~caf%E9.txt",
            b"big.bin": "interop/big.bin"}
    for rel, key in keys.items():
        body, _ = s3_get(weed, key)
        assert body == files[rel], key
    assert sorted(list_keys(weed, "interop/")) == sorted(k.replace("&", "&amp;") for k in keys.values())
