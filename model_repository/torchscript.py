"""Writes TorchScript archives (`model.pt`) without PyTorch: a TorchScript file is a zip archive
whose `code/__torch__.py` holds the module's TorchScript source, compiled by libtorch when it
loads the file, and whose `data.pkl` pickles the root module object. Modules here have no
parameters, so the pickle only names the class. Used by generate_torchscript.py and the tests
(to make broken models); libtorch itself checks the source when Tritium loads it.
"""
import zipfile

VERSION = b"3\n"


def data_pickle(class_name: str) -> bytes:
    """Protocol 2: GLOBAL '__torch__ <class>', EMPTY_TUPLE, NEWOBJ, EMPTY_DICT, BUILD, STOP."""
    return b"\x80\x02c__torch__\n" + class_name.encode() + b"\nq\x00)\x81}(ubq\x01."


def write_archive(path, class_name: str, source: str, root: str = "model") -> None:
    """`source` is the class body's TorchScript, starting with `class <class_name>(Module):`."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr(f"{root}/data.pkl", data_pickle(class_name))
        z.writestr(f"{root}/code/__torch__.py", source)
        z.writestr(f"{root}/constants.pkl", b"\x80\x02).")
        z.writestr(f"{root}/version", VERSION)
        z.writestr(f"{root}/byteorder", b"little")


def module_source(class_name: str, signature: str, body: str) -> str:
    """A parameterless module: `signature` is forward's arguments after self and its return
    annotation, e.g. `x: Tensor) -> Tensor`; `body` its statements, indented by four spaces."""
    return (f"class {class_name}(Module):\n  __parameters__ = []\n  __buffers__ = []\n"
            f"  def forward(self: __torch__.{class_name},\n    {signature}:\n{body}")


def short_unicode(s: str) -> bytes:
    """Pickle's BINUNICODE opcode for `s`."""
    b = s.encode()
    return b"X" + len(b).to_bytes(4, "little") + b


def wrap_archive(src_path, dst_path, class_name: str, attribute: str, source: str) -> None:
    """A new TorchScript archive whose root module is `class_name` (its TorchScript `source` is
    added as `code/__torch__.py`) holding the root module of `src_path` as `attribute`: every
    other record (code, tensors) is copied unchanged. The new root's pickle wraps the old one:
    GLOBAL '__torch__ <class>', NEWOBJ, a dict {'training': False, attribute: <old root>}, BUILD.
    The old pickle's memo numbers stay its own: nothing added here uses the memo."""
    with zipfile.ZipFile(src_path) as src:
        roots = [n for n in src.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(roots) != 1:
            raise ValueError(f"{src_path}: expected one root data.pkl, got {roots}")
        root = roots[0][: -len("data.pkl")]
        if root + "code/__torch__.py" in src.namelist():
            raise ValueError(f"{src_path} already has code/__torch__.py")
        old = src.read(roots[0])
        if old[:2] != b"\x80\x02" or old[-1:] != b".":
            raise ValueError(f"{src_path}: data.pkl is not a protocol 2 pickle")
        new = (b"\x80\x02c__torch__\n" + class_name.encode() + b"\n)\x81}(" + short_unicode("training") + b"\x89"
               + short_unicode(attribute) + old[2:-1] + b"ub.")
        with zipfile.ZipFile(dst_path, "w", zipfile.ZIP_STORED) as dst:
            for info in src.infolist():
                dst.writestr(info.filename, new if info.filename == roots[0] else src.read(info.filename))
            dst.writestr(root + "code/__torch__.py", source)
