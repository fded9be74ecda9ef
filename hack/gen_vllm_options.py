"""Writes the table of every `vllm serve` option, read from vLLM's own parser.

Run with the vLLM parser venv (make vllm-venv):

    VLLM_TARGET_DEVICE=cpu .qdd/vllm-venv/bin/python hack/gen_vllm_options.py \
        > operator/src/qdd/catalog/data/vllm-0.33.0-serve-options.json

tests/contract/test_vllm_options.py regenerates it and fails on any difference, so the table
qdd resolves extraArgs with (qdd.catalog.vllm_options) stays what vLLM 0.33.0 parses.

Per option (an argparse action of the serve subparser, built as vllm/entrypoints/cli/main.py
builds it): every option string (long names, single-dash aliases such as -tp, the --no-
negations of boolean flags), the dest, whether it takes a value and how many (nargs), and the
choices when it has them. Parser-wide: argparse's allow_abbrev (unique prefixes of long options are accepted) and the
rewrites FlexibleArgumentParser.parse_args makes before argparse sees the argv.
"""

from __future__ import annotations

import argparse
import json
import sys


def main() -> int:
    import vllm
    import vllm.entrypoints.cli.serve as serve_mod
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    top = FlexibleArgumentParser(description="vLLM CLI")
    subparsers = top.add_subparsers(required=False, dest="subparser")
    serve = serve_mod.ServeSubcommand().subparser_init(subparsers)
    # Every string argparse matches, from the parser's own map: vLLM's EnableDisableAction shows
    # only --enable-x/--disable-x in option_strings but still registers --no-enable-x there.
    strings: dict[int, list[str]] = {}
    for string, action in serve._option_string_actions.items():
        strings.setdefault(id(action), []).append(string)
    options = []
    for action in serve._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        choices = sorted(str(c) for c in action.choices) if action.choices is not None else None
        options.append({
            "dest": action.dest,
            "strings": sorted(strings[id(action)]),
            "takes_value": action.nargs != 0,
            # argparse nargs: "1" (one value; argparse's None), "0" (a flag), "?", "+", "*" or a count.
            "nargs": "1" if action.nargs is None else str(action.nargs),
            "choices": choices,
        })
    options.sort(key=lambda o: o["dest"])
    table = {
        "vllm_version": vllm.__version__,
        "allow_abbrev": serve.allow_abbrev,
        "parser_rewrites": [
            "--x_y → --x-y between -- and the first '.' (FlexibleArgumentParser.parse_args)",
            "--opt.key value / --opt.key=value → --opt '{\"key\": value}' (dotted JSON keys)",
            "-O<level>, -O=<level>, -O <0-3> → --optimization-level <level>",
            "--config FILE inserts the file's options",
        ],
        "options": options,
    }
    json.dump(table, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
