"""hf_ot/models is type-checked: the OT config mixin declares its fields for the type checker (the runtime fields
come from OT_SETTINGS), and those declarations must name exactly the table's fields."""

import ast
import inspect

from hf_ot.models import ot_config


def _type_checking_annotations(cls) -> set[str]:
    tree = ast.parse(inspect.getsource(ot_config))
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls.__name__).body
    blocks = [n for n in body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)]
    return {n.target.id for b in blocks for n in b.body if isinstance(n, ast.AnnAssign)}


def test_config_mixin_declares_every_ot_field_for_the_type_checker():
    declared = {name for name in _type_checking_annotations(ot_config.OTConfigMixin) if name.startswith("ot_")}
    assert declared == {setting.field for setting in ot_config.OT_SETTINGS}


def test_type_checking_declarations_add_no_runtime_fields():
    import dataclasses

    fields = {f.name for f in dataclasses.fields(ot_config.OTConfigMixin)}
    assert fields == {setting.field for setting in ot_config.OT_SETTINGS}
