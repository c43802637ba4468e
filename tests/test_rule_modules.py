"""hlo.rule_modules.RuleModule: a rule table's module is imported once, by the first caller, while
concurrent callers wait for it; a rules module that calls back into its registry while importing works."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from hlo.rule_modules import RuleModule


def _fake_rules(tmp_path, monkeypatch, body: str) -> str:
    name = f"fake_rules_{abs(hash(body)) % 10**8}"
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_concurrent_first_calls_import_once_and_all_see_the_rules(tmp_path, monkeypatch) -> None:
    name = _fake_rules(tmp_path, monkeypatch,
                       "import time\nIMPORTS = []\ntime.sleep(0.2)\nIMPORTS.append(1)\nRULES = {'add': 1}\n")
    load = RuleModule(name)
    seen = []

    def use() -> None:
        load()
        seen.append(dict(sys.modules[name].RULES))  # complete, never half-imported

    threads = [threading.Thread(target=use) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == [{"add": 1}] * 6
    assert sys.modules[name].IMPORTS == [1]


def test_a_rules_module_may_call_back_while_it_imports(tmp_path, monkeypatch) -> None:
    load_box: list = []
    monkeypatch.setitem(sys.modules, "rule_box", type(sys)("rule_box"))
    sys.modules["rule_box"].box = load_box
    name = _fake_rules(tmp_path, monkeypatch, "import rule_box\nrule_box.box[0]()\nDONE = True\n")
    load = RuleModule(name)
    load_box.append(load)
    t = threading.Thread(target=load)
    start = time.monotonic()
    t.start()
    t.join(10)
    assert not t.is_alive(), "re-entrant call deadlocked"
    assert time.monotonic() - start < 10
    assert sys.modules[name].DONE


def test_a_missing_rules_module_raises_and_is_retried(tmp_path, monkeypatch) -> None:
    load = RuleModule("no_such_rules_module_xyz")
    with pytest.raises(ModuleNotFoundError, match="no_such_rules_module_xyz"):
        load()
    (tmp_path / "no_such_rules_module_xyz.py").write_text("OK = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    load()
    assert sys.modules["no_such_rules_module_xyz"].OK == 1
