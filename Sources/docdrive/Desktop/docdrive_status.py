# The client of a DocDrive daemon's status socket ($XDG_RUNTIME_DIR/docdrive/status-HASH.sock, the
# line protocol of docs/dev/control.md "The status socket"), shared by the file manager extension
# (docdrive_files.py) and the document picker (docdrive_picker.py): each is installed or run as
# one file, this text followed by its own (`Desktop.pythonText` in DesktopCommand.swift).
import os
import socket
import threading


def escape(s):
    return s.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def unescape(s):
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            out.append({"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}.get(s[i + 1], s[i + 1]))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def socket_folder():
    run = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.geteuid()}"
    return os.path.join(run, "docdrive")


class Connection:
    """One connection to a daemon's status socket; its first line names the mount."""

    def __init__(self, path, timeout=5.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b""
        hello = self.read_line()
        if len(hello) < 4 or hello[0] != "docdrive-status":
            raise OSError(f"not a DocDrive status socket: {path}")
        self.mountpoint, self.home = hello[2], hello[3]

    def read_line(self):
        while b"\n" not in self.buf:
            data = self.sock.recv(65536)
            if not data:
                raise OSError("the daemon closed the status socket")
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return [unescape(f) for f in line.decode("utf-8", "surrogateescape").split("\t")]

    def send(self, *fields):
        self.sock.sendall(("\t".join(escape(f) for f in fields) + "\n").encode("utf-8", "surrogateescape"))

    def ask(self, *fields):
        """Sends a request; returns its answer's lines (those before "done")."""
        self.send(*fields)
        lines = []
        while True:
            line = self.read_line()
            if line[0] == "done":
                return lines
            if line[0] == "error":
                raise OSError(line[1] if len(line) > 1 else "error")
            lines.append(line)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class Drive:
    """A mounted drive: a connection for questions, one that listens for changes."""

    def __init__(self, path, on_status):
        self.path = path
        self.lock = threading.Lock()
        self.ask_conn = Connection(path)
        self.mountpoint, self.home = self.ask_conn.mountpoint, self.ask_conn.home
        self.watch_conn = Connection(path)
        self.watch_conn.sock.setblocking(False)
        self.subscribed = set()
        self.alive = True
        self.on_status = on_status
        # Change lines are read on the file manager's main loop (its Python may run no thread
        # of ours while it waits for events). GLib is imported here, not above, so that the
        # picker can say in a sentence that python3-gi is missing.
        from gi.repository import GLib
        GLib.io_add_watch(self.watch_conn.sock.fileno(), GLib.PRIORITY_DEFAULT, GLib.IO_IN | GLib.IO_HUP | GLib.IO_ERR, self.readable)

    def contains(self, path):
        return path == self.mountpoint or path.startswith(self.mountpoint.rstrip("/") + "/")

    def status(self, paths):
        out = {}
        with self.lock:
            for i in range(0, len(paths), 500):
                for line in self.ask_conn.ask("status", *paths[i:i + 500]):
                    if line[0] == "status" and len(line) >= 4:
                        out[line[1]] = (line[2], line[3] == "pinned")
        return out

    def conflicts(self, paths):
        with self.lock:
            return [(l[1], l[2]) for l in self.ask_conn.ask("conflicts", *paths) if l[0] == "conflict" and len(l) >= 3]

    def subscribe(self, folder):
        if folder not in self.subscribed:
            self.subscribed.add(folder)
            self.watch_conn.sock.setblocking(True)
            try:
                self.watch_conn.send("subscribe", folder)
            finally:
                self.watch_conn.sock.setblocking(False)

    def readable(self, fd, condition):
        """The listening connection has bytes: each whole status line is a change."""
        c = self.watch_conn
        try:
            data = c.sock.recv(1 << 20)
        except BlockingIOError:
            return True
        except OSError:
            data = b""
        if not data:
            self.alive = False
            return False
        c.buf += data
        while b"\n" in c.buf:
            raw, c.buf = c.buf.split(b"\n", 1)
            line = [unescape(f) for f in raw.decode("utf-8", "surrogateescape").split("\t")]
            if line[0] == "status" and len(line) >= 4:
                self.on_status(line[1], line[2], line[3] == "pinned")
        return True
