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
