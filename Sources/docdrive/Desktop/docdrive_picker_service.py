# The document picker on the session bus: the name org.docdrive.Picker1, object
# /org/docdrive/Picker1, interface org.docdrive.Picker1, a method per mode. Each call runs
# `docdrive pick --json` (the window, docdrive_picker.py) for the app and answers with the paths
# it printed; Cancel is the error org.docdrive.Picker1.Error.Cancelled, a failure
# org.docdrive.Picker1.Error.Failed with the picker's sentence. D-Bus starts it on the first call
# (the activation file `docdrive desktop install` writes runs `docdrive desktop picker-service`),
# and it ends after a minute without calls. The pickers it runs have its environment: the bus's
# activation environment (DISPLAY, DOCDRIVE_HOME, ...).
import json
import sys

from gi.repository import Gio, GLib

DOCDRIVE = "@DOCDRIVE@"
NAME = "org.docdrive.Picker1"
PATH = "/org/docdrive/Picker1"
IDLE_SECONDS = 60
XML = f"""<node>
  <interface name="{NAME}">
    <method name="Open"><arg name="app" type="s"/><arg name="types" type="as"/><arg name="multiple" type="b"/>
      <arg name="title" type="s"/><arg name="paths" type="as" direction="out"/></method>
    <method name="Import"><arg name="app" type="s"/><arg name="types" type="as"/><arg name="multiple" type="b"/>
      <arg name="title" type="s"/><arg name="paths" type="as" direction="out"/></method>
    <method name="MoveTo"><arg name="app" type="s"/><arg name="documents" type="as"/>
      <arg name="title" type="s"/><arg name="paths" type="as" direction="out"/></method>
    <method name="ExportTo"><arg name="app" type="s"/><arg name="documents" type="as"/>
      <arg name="title" type="s"/><arg name="paths" type="as" direction="out"/></method>
  </interface>
</node>"""
MODES = {"Open": "open", "Import": "import", "MoveTo": "move-to", "ExportTo": "export-to"}


class Service:
    def __init__(self, loop):
        self.loop = loop
        self.calls = 0
        self.idle = None
        self.rest()

    def rest(self):
        """Ends the service after IDLE_SECONDS without a call running."""
        if self.idle is not None:
            GLib.source_remove(self.idle)
        self.idle = GLib.timeout_add_seconds(IDLE_SECONDS, self.loop.quit) if self.calls == 0 else None

    def call(self, connection, sender, path, interface, method, params, invocation):
        mode = MODES.get(method)
        if mode is None:
            invocation.return_dbus_error(f"{NAME}.Error.Failed", f"There is no method {method}.")
            return
        args = params.unpack()
        argv = [DOCDRIVE, "pick", "--app", args[0], "--mode", mode, "--json"]
        if mode in ("open", "import"):
            argv += [a for t in args[1] for a in ("--type", t)] + (["--multiple"] if args[2] else [])
            title, documents = args[3], []
        else:
            title, documents = args[2], list(args[1])
        if title:
            argv += ["--title", title]
        argv += documents
        try:
            p = Gio.Subprocess.new(argv, Gio.SubprocessFlags.STDOUT_PIPE | Gio.SubprocessFlags.STDERR_PIPE)
        except GLib.Error as e:
            invocation.return_dbus_error(f"{NAME}.Error.Failed", f"Cannot run docdrive pick: {e.message}.")
            return
        self.calls += 1
        self.rest()
        p.communicate_utf8_async(None, None, self.done, invocation)

    def done(self, p, res, invocation):
        self.calls -= 1
        self.rest()
        try:
            _, out, err = p.communicate_utf8_finish(res)
        except GLib.Error as e:
            invocation.return_dbus_error(f"{NAME}.Error.Failed", e.message)
            return
        try:
            answer = json.loads(out or "")
        except ValueError:
            answer = {}
        # The picker's own sentences (GTK and GIO may write warnings of theirs too).
        sentences = [line[len("docdrive: "):] for line in (err or "").splitlines() if line.startswith("docdrive: ")]
        if p.get_exit_status() == 0:
            invocation.return_value(GLib.Variant("(as)", (answer.get("paths", []),)))
        elif answer.get("cancelled") and not answer.get("paths") and not sentences:
            invocation.return_dbus_error(f"{NAME}.Error.Cancelled", "The picker was cancelled.")
        else:
            invocation.return_dbus_error(f"{NAME}.Error.Failed", sentences[-1] if sentences else f"docdrive pick exited {p.get_exit_status()}.")


def main():
    loop = GLib.MainLoop()
    service = Service(loop)
    bus = Gio.bus_get_sync(Gio.BusType.SESSION, None)
    info = Gio.DBusNodeInfo.new_for_xml(XML).interfaces[0]
    bus.register_object(PATH, info, service.call, None, None)
    owned = []
    Gio.bus_own_name_on_connection(bus, NAME, Gio.BusNameOwnerFlags.NONE,
                                   lambda *_: owned.append(True), lambda *_: loop.quit())
    loop.run()
    return 0 if owned else 1


if __name__ == "__main__":
    sys.exit(main())
