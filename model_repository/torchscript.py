"""Writes TorchScript archives (`model.pt`) without PyTorch: a TorchScript file is a zip archive
whose `code/__torch__.py` holds the module's TorchScript source, compiled by libtorch when it
loads the file, and whose `data.pkl` pickles the root module object. Modules here have no
parameters, so the pickle only names the class. Used by generate_torchscript.py and the tests
(to make broken models); libtorch itself checks the source when Tritium loads it.
"""
import zipfile

VERSION = b"3\n"


def short_unicode(s: str) -> bytes:
    """Pickle's BINUNICODE opcode for `s`."""
    b = s.encode()
    return b"X" + len(b).to_bytes(4, "little") + b


def _int(v: int) -> bytes:
    """Pickle's BININT (a signed 4-byte little-endian integer)."""
    return b"J" + int(v).to_bytes(4, "little", signed=True)


def tensor_pickle(key: int, shape) -> bytes:
    """A float32 tensor stored in `data/<key>`, contiguous, as torch.save pickles one:
    torch._utils._rebuild_tensor_v2((persistent storage id), offset 0, size, stride, False,
    OrderedDict())."""
    numel = 1
    for d in shape:
        numel *= d
    strides, acc = [], 1
    for d in reversed(shape):
        strides.insert(0, acc)
        acc *= d
    storage = (b"(" + short_unicode("storage") + b"ctorch\nFloatStorage\n" + short_unicode(str(key))
               + short_unicode("cpu") + _int(numel) + b"tQ")
    return (b"ctorch._utils\n_rebuild_tensor_v2\n(" + storage + _int(0)
            + b"(" + b"".join(_int(d) for d in shape) + b"t"
            + b"(" + b"".join(_int(s) for s in strides) + b"t"
            + b"\x89ccollections\nOrderedDict\n)RtR")


def data_pickle(class_name: str, tensors=None) -> bytes:
    """Protocol 2: GLOBAL '__torch__ <class>', EMPTY_TUPLE, NEWOBJ, a dict of the module's
    attributes ('training' and each tensor), BUILD, STOP."""
    items = b"".join(short_unicode(name) + tensor_pickle(key, array.shape)
                     for key, (name, array) in enumerate((tensors or {}).items()))
    attributes = (short_unicode("training") + b"\x89") if tensors else b""
    return b"\x80\x02c__torch__\n" + class_name.encode() + b"\n)\x81}(" + attributes + items + b"ub."


def _put(archive, name, data):
    """One stored record with a fixed date, so the same model makes the same bytes every run."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    archive.writestr(info, data)


def write_archive(path, class_name: str, source: str, root: str = "model", tensors=None) -> None:
    """`source` is the class body's TorchScript, starting with `class <class_name>(Module):`.
    `tensors` (name -> float32 numpy array) become the module's tensor attributes, which the
    source declares as `<name> : Tensor`."""
    tensors = tensors or {}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        _put(z, f"{root}/data.pkl", data_pickle(class_name, tensors))
        for key, (name, array) in enumerate(tensors.items()):
            _put(z, f"{root}/data/{key}", array.astype("<f4").tobytes())
        _put(z, f"{root}/code/__torch__.py", source)
        _put(z, f"{root}/constants.pkl", b"\x80\x02).")
        _put(z, f"{root}/version", VERSION)
        _put(z, f"{root}/byteorder", b"little")


def module_source(class_name: str, signature: str, body: str) -> str:
    """A parameterless module: `signature` is forward's arguments after self and its return
    annotation, e.g. `x: Tensor) -> Tensor`; `body` its statements, indented by four spaces."""
    return (f"class {class_name}(Module):\n  __parameters__ = []\n  __buffers__ = []\n"
            f"  def forward(self: __torch__.{class_name},\n    {signature}:\n{body}")



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
                _put(dst, info.filename, new if info.filename == roots[0] else src.read(info.filename))
            _put(dst, root + "code/__torch__.py", source)
