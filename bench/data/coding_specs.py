"""The source trees and the test files of the coding sessions (see bench/data/README.md).

Each tree is an installed distribution copied from site-packages; each test
file holds checks of its public behaviour written for these sessions. The
expected values are not written here: the generator computes them by running
each expression on the unmodified tree, so the tests pass on the real code and
fail only where a session injects a bug.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TestFile:
    """One tests/test_<name>.py: the module it exercises and (test name, expression) pairs."""

    name: str
    module: str          # path of the module, relative to the tree, whose lines may be mutated
    imports: str         # import lines of the test file
    tests: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Tree:
    dist: str            # distribution name (importlib.metadata)
    version: str         # the pinned version (.ci/constraints.txt); the build refuses another
    packages: tuple[str, ...]  # top-level packages copied into the tree
    licence: str
    files: tuple[TestFile, ...]


TREES: tuple[Tree, ...] = (
    Tree("packaging", "26.2", ("packaging",), "Apache-2.0 OR BSD-2-Clause", (
        TestFile("version", "packaging/version.py", "from packaging.version import Version, parse", (
            ("test_post_release_sorts_after_final", 'Version("1.0.post1") > Version("1.0")'),
            ("test_normalized_string", 'str(Version("1.0.0-RC1"))'),
            ("test_epoch_parsed", 'Version("2!1.4").epoch'),
            ("test_dev_is_prerelease", 'Version("3.1.dev4").is_prerelease'),
            ("test_base_version_drops_local", 'Version("1.2.3.post4+ubuntu.1").base_version'),
            ("test_public_drops_local", 'Version("1.2+abc.5").public'),
            ("test_pre_tuple", 'Version("1.0b2").pre'),
            ("test_local_segments", 'Version("1.0+ab.12.cd").local'),
            ("test_sort_order", 'sorted(["1.0", "1.0a1", "1.0.post1", "1.0.dev1", "0.9"], key=parse)'),
            ("test_release_of_long_version", 'Version("1.2.3.4.5").release'),
        )),
        TestFile("specifiers", "packaging/specifiers.py",
                 "from packaging.specifiers import Specifier, SpecifierSet", (
            ("test_compatible_release_contains", 'Specifier("~=1.4.2").contains("1.4.5")'),
            ("test_compatible_release_upper_bound", 'Specifier("~=1.4.2").contains("1.5.0")'),
            ("test_wildcard_equality", 'Specifier("==1.*").contains("1.9.3")'),
            ("test_exclusive_greater_than_post", 'Specifier(">1.0").contains("1.0.post1")'),
            ("test_set_range", '"1.5" in SpecifierSet(">=1.0,<2.0")'),
            ("test_set_excludes_prerelease", 'SpecifierSet(">=1.0").contains("2.0a1")'),
            ("test_filter_keeps_order", 'list(SpecifierSet(">=1.2,!=1.3").filter(["1.1", "1.2", "1.3", "1.4"]))'),
            ("test_not_equal_wildcard", 'Specifier("!=2.*").contains("2.1")'),
            ("test_less_equal", 'Specifier("<=2.0").contains("2.0")'),
            ("test_str_of_set", 'str(SpecifierSet("<3,>=1.0"))'),
        )),
        TestFile("utils", "packaging/utils.py",
                 "from packaging.utils import canonicalize_name, canonicalize_version, parse_wheel_filename", (
            ("test_canonicalize_name", 'canonicalize_name("Foo.Bar__baz")'),
            ("test_canonicalize_version_strips_zeros", 'canonicalize_version("1.0.0")'),
            ("test_canonicalize_version_keeps_pre", 'canonicalize_version("2.10.0rc1")'),
            ("test_wheel_name", 'parse_wheel_filename("foo_bar-1.0-py3-none-any.whl")[0]'),
            ("test_wheel_build_tag", 'parse_wheel_filename("pkg-2.0-1abc-py3-none-any.whl")[2]'),
            ("test_wheel_tags", 'sorted(str(t) for t in parse_wheel_filename("pkg-2.0-cp311.cp312-abi3-linux_x86_64.whl")[3])'),
            ("test_wheel_version", 'str(parse_wheel_filename("Pkg_Name-3.1.4-py2.py3-none-any.whl")[1])'),
            ("test_canonicalize_version_trailing", 'canonicalize_version("1.2.0.0.post3")'),
        )),
    )),
    Tree("click", "8.5.1", ("click",), "BSD-3-Clause", (
        TestFile("formatting", "click/formatting.py", "from click.formatting import wrap_text, HelpFormatter", (
            ("test_wrap_plain", 'wrap_text("The quick brown fox jumps over the lazy dog", width=16)'),
            ("test_wrap_indent", 'wrap_text("alpha beta gamma delta", width=12, initial_indent="> ", subsequent_indent="  ")'),
            ("test_wrap_paragraphs", 'wrap_text("one two three\\n\\nfour five six", width=9, preserve_paragraphs=True)'),
            ("test_wrap_no_rewrap_block", 'wrap_text("\\b\\nkeep  this\\nas is", width=6, preserve_paragraphs=True)'),
            ("test_usage_line", '(lambda f: (f.write_usage("tool", "[OPTIONS] SRC DST"), f.getvalue())[1])(HelpFormatter(width=40))'),
            ("test_definition_list", '(lambda f: (f.write_dl([("-v", "Verbose output."), ("--name TEXT", "The name to greet, repeated as many times as asked.")]), f.getvalue())[1])(HelpFormatter(width=50))'),
            ("test_heading", '(lambda f: (f.write_heading("Options"), f.getvalue())[1])(HelpFormatter())'),
        )),
        TestFile("parser", "click/parser.py", "from click.parser import _split_opt, _normalize_opt, _unpack_args", (
            ("test_split_long", '_split_opt("--verbose")'),
            ("test_split_short", '_split_opt("-v")'),
            ("test_split_plain", '_split_opt("value")'),
            ("test_normalize_with_ctx_none", '_normalize_opt("--Name", None)'),
            ("test_unpack_fixed", '_unpack_args(["a", "b", "c"], [1, 1, 1])'),
            ("test_unpack_variadic", '_unpack_args(["a", "b", "c", "d"], [1, -1, 1])'),
            ("test_unpack_pairs", '_unpack_args(["a", "b", "c", "d", "e"], [2, -1])'),
        )),
        TestFile("types", "click/types.py", "import click", (
            ("test_int_range_clamp", 'click.IntRange(0, 10, clamp=True).convert(15, None, None)'),
            ("test_int_range_inside", 'click.IntRange(0, 10).convert("7", None, None)'),
            ("test_float_range_open", 'click.FloatRange(0, 1, min_open=True).convert("0.5", None, None)'),
            ("test_choice_case_insensitive", 'click.Choice(["Red", "Green"], case_sensitive=False).convert("green", None, None)'),
            ("test_bool_strings", '[click.BOOL.convert(v, None, None) for v in ("yes", "0", "On", "f")]'),
            ("test_int_range_repr", 'repr(click.IntRange(1, 5, max_open=True))'),
            ("test_tuple_convert", 'click.Tuple([int, str]).convert(("3", 4), None, None)'),
            ("test_int_range_clamp_low", 'click.IntRange(5, 10, clamp=True).convert(-3, None, None)'),
        )),
    )),
    Tree("Jinja2", "3.1.6", ("jinja2",), "BSD-3-Clause", (
        TestFile("filters", "jinja2/filters.py", "from jinja2 import Environment\n\nenv = Environment()", (
            ("test_truncate", 'env.from_string("{{ s|truncate(12) }}").render(s="The quick brown fox jumps")'),
            ("test_truncate_killwords", 'env.from_string("{{ s|truncate(10, True, \'..\') }}").render(s="Supercalifragilistic")'),
            ("test_center", 'env.from_string("[{{ s|center(9) }}]").render(s="abc")'),
            ("test_wordcount", 'env.from_string("{{ s|wordcount }}").render(s="one two  three, four")'),
            ("test_filesizeformat", 'env.from_string("{{ n|filesizeformat }}|{{ n|filesizeformat(true) }}").render(n=1536000)'),
            ("test_indent", 'env.from_string("{{ s|indent(2, first=True) }}").render(s="a\\nb\\n\\nc")'),
            ("test_batch", 'env.from_string("{% for r in xs|batch(3, 0) %}{{ r }};{% endfor %}").render(xs=range(7))'),
            ("test_slice", 'env.from_string("{% for c in xs|slice(3) %}{{ c|list }};{% endfor %}").render(xs=range(7))'),
            ("test_wordwrap", 'env.from_string("{{ s|wordwrap(10) }}").render(s="lorem ipsum dolor sit amet consectetur")'),
            ("test_round", 'env.from_string("{{ 2.675|round(2, \'floor\') }} {{ 2.5|round }}").render()'),
        )),
        TestFile("utils", "jinja2/utils.py", "from jinja2.utils import urlize, LRUCache, pformat", (
            ("test_urlize_plain", 'urlize("see https://example.com/a?b=c now")'),
            ("test_urlize_trim", 'urlize("visit http://example.org/a/very/long/path/here", trim_url_limit=20)'),
            ("test_urlize_email", 'urlize("mail someone@example.com please")'),
            ("test_lru_evicts_oldest", '(lambda c: (c.__setitem__("a", 1), c.__setitem__("b", 2), c.__getitem__("a"), c.__setitem__("c", 3), sorted(c.keys()))[-1])(LRUCache(2))'),
            ("test_lru_items_order", '(lambda c: ([c.__setitem__(k, i) for i, k in enumerate("wxyz")], c.items())[-1])(LRUCache(3))'),
            ("test_urlize_www", 'urlize("go to www.example.net.")'),
        )),
    )),
    Tree("requests", "2.34.2", ("requests",), "Apache-2.0", (
        TestFile("utils", "requests/utils.py", "from requests import utils", (
            ("test_parse_header_links", 'utils.parse_header_links(\'<http://a.example/p?page=2>; rel="next", <http://a.example/p?page=5>; rel="last"\')'),
            ("test_requote_uri", 'utils.requote_uri("http://example.com/fiz?buz=%ppicture")'),
            ("test_unquote_unreserved", 'utils.unquote_unreserved("http://example.com/%7Euser/%2Fx")'),
            ("test_parse_dict_header", 'sorted(utils.parse_dict_header(\'foo="is a fish", bar="as well", baz\').items(), key=str)'),
            ("test_parse_list_header", 'utils.parse_list_header(\'token, "quoted value", other\')'),
            ("test_encoding_from_headers", 'utils.get_encoding_from_headers({"content-type": "text/html; charset=\\"ISO-8859-1\\""})'),
            ("test_encoding_default_text", 'utils.get_encoding_from_headers({"content-type": "text/plain"})'),
            ("test_guess_json_utf", 'utils.guess_json_utf(\'{"a": 1}\'.encode("utf-16-le"))'),
            ("test_address_in_network", 'utils.address_in_network("192.168.1.7", "192.168.1.0/24")'),
            ("test_select_proxy", 'utils.select_proxy("https://example.com:8443/x", {"https://example.com": "p1", "https": "p2"})'),
        )),
        TestFile("structures", "requests/structures.py", "from requests.structures import CaseInsensitiveDict, LookupDict", (
            ("test_case_insensitive_get", 'CaseInsensitiveDict({"Content-Type": "json"})["content-type"]'),
            ("test_keeps_last_case", 'list(CaseInsensitiveDict([("Accept", "a"), ("ACCEPT", "b")]).items())'),
            ("test_lower_items", 'list(CaseInsensitiveDict({"X-Token": "1"}).lower_items())'),
            ("test_equality_ignores_case", 'CaseInsensitiveDict({"A": 1}) == {"a": 1}'),
            ("test_delete", '(lambda d: (d.__delitem__("KEY"), len(d))[1])(CaseInsensitiveDict({"key": 1, "other": 2}))'),
            ("test_lookup_dict_missing", 'LookupDict("codes").get("missing", "dflt")'),
        )),
    )),
    Tree("python-dateutil", "2.9.0.post0", ("dateutil",), "Apache-2.0 AND BSD-3-Clause", (
        TestFile("relativedelta", "dateutil/relativedelta.py",
                 "import datetime\nfrom dateutil.relativedelta import relativedelta, MO, FR", (
            ("test_add_months_end", '(datetime.date(2024, 1, 31) + relativedelta(months=1)).isoformat()'),
            ("test_normalize_days", 'repr(relativedelta(days=+40, hours=-1).normalized())'),
            ("test_next_friday", '(datetime.date(2024, 3, 5) + relativedelta(weekday=FR(+1))).isoformat()'),
            ("test_second_monday", '(datetime.date(2024, 9, 1) + relativedelta(day=1, weekday=MO(+2))).isoformat()'),
            ("test_difference", 'repr(relativedelta(datetime.date(2024, 5, 17), datetime.date(2021, 2, 28)))'),
            ("test_years_leap", '(datetime.date(2024, 2, 29) + relativedelta(years=1)).isoformat()'),
            ("test_absolute_fields", '(datetime.datetime(2024, 6, 15, 8, 30) + relativedelta(hour=0, minute=0, months=-2)).isoformat()'),
            ("test_weeks_property", 'relativedelta(days=17).weeks'),
            ("test_multiply", 'repr(relativedelta(months=5, days=3) * 2)'),
        )),
        TestFile("parser", "dateutil/parser/_parser.py", "from dateutil import parser", (
            ("test_iso_like", 'parser.parse("2003-09-25T10:49:41").isoformat()'),
            ("test_month_name", 'parser.parse("Thu Sep 25 10:36:28 2003").isoformat()'),
            ("test_dayfirst", 'parser.parse("10/09/2003", dayfirst=True).isoformat()'),
            ("test_ampm", 'parser.parse("July 4, 1976 3:05 pm").isoformat()'),
            ("test_fuzzy", 'parser.parse("Today is 25 of September of 2003, exactly at 10:49:41", fuzzy=True).isoformat()'),
            ("test_tz_offset", 'parser.parse("2003-09-25 10:49:41 -0300").utcoffset().total_seconds()'),
            ("test_compact", 'parser.parse("20030925T104941").isoformat()'),
            ("test_yearfirst_short", 'parser.parse("10-09-03", yearfirst=True).isoformat()'),
        )),
    )),
    Tree("markdown-it-py", "4.3.0", ("markdown_it",), "MIT", (
        TestFile("render", "markdown_it/rules_block/list.py", "from markdown_it import MarkdownIt\n\nmd = MarkdownIt()", (
            ("test_bullet_list", 'md.render("- one\\n- two\\n")'),
            ("test_ordered_start", 'md.render("3. three\\n4. four\\n")'),
            ("test_nested_list", 'md.render("- a\\n  - b\\n- c\\n")'),
            ("test_loose_list", 'md.render("- a\\n\\n- b\\n")'),
            ("test_list_after_paragraph", 'md.render("text\\n- item\\n")'),
            ("test_ordered_paren", 'md.render("1) x\\n2) y\\n")'),
        )),
        TestFile("inline", "markdown_it/rules_inline/emphasis.py", "from markdown_it import MarkdownIt\n\nmd = MarkdownIt()", (
            ("test_emphasis", 'md.renderInline("*em* and **strong**")'),
            ("test_underscore_intraword", 'md.renderInline("snake_case_name")'),
            ("test_nested_emphasis", 'md.renderInline("***both***")'),
            ("test_unclosed", 'md.renderInline("**open *x")'),
            ("test_code_span", 'md.renderInline("use `a*b*c` here")'),
        )),
        TestFile("heading", "markdown_it/rules_block/heading.py", "from markdown_it import MarkdownIt\n\nmd = MarkdownIt()", (
            ("test_h2", 'md.render("## Title ##\\n")'),
            ("test_h6", 'md.render("###### six\\n")'),
            ("test_not_heading", 'md.render("####### seven\\n")'),
            ("test_empty_heading", 'md.render("#\\n")'),
            ("test_heading_trailing_hashes", 'md.render("# foo #bar #\\n")'),
        )),
    )),
    Tree("jmespath", "1.1.0", ("jmespath",), "MIT", (
        TestFile("search", "jmespath/visitor.py", "import jmespath", (
            ("test_field", 'jmespath.search("a.b", {"a": {"b": 3}})'),
            ("test_slice", 'jmespath.search("xs[1:4]", {"xs": [0, 1, 2, 3, 4, 5]})'),
            ("test_negative_slice", 'jmespath.search("xs[::-2]", {"xs": [0, 1, 2, 3, 4]})'),
            ("test_filter", 'jmespath.search("people[?age > `30`].name", {"people": [{"name": "a", "age": 31}, {"name": "b", "age": 30}]})'),
            ("test_projection", 'jmespath.search("items[*].id", {"items": [{"id": 1}, {"id": 2}, {}]})'),
            ("test_or_expression", 'jmespath.search("missing || fallback", {"fallback": "x"})'),
            ("test_flatten", 'jmespath.search("a[]", {"a": [[1, 2], 3, [4]]})'),
            ("test_multiselect_hash", 'jmespath.search("{n: name, c: length(tags)}", {"name": "x", "tags": [1, 2]})'),
        )),
        TestFile("functions", "jmespath/functions.py", "import jmespath", (
            ("test_sort_by", 'jmespath.search("sort_by(xs, &v)[*].k", {"xs": [{"k": "a", "v": 3}, {"k": "b", "v": 1}]})'),
            ("test_max_by", 'jmespath.search("max_by(xs, &v).k", {"xs": [{"k": "a", "v": 3}, {"k": "b", "v": 9}]})'),
            ("test_join", 'jmespath.search("join(\', \', names)", {"names": ["x", "y"]})'),
            ("test_starts_with", 'jmespath.search("starts_with(s, \'ab\')", {"s": "abc"})'),
            ("test_avg", 'jmespath.search("avg(xs)", {"xs": [1, 2, 6]})'),
            ("test_to_number", 'jmespath.search("to_number(s)", {"s": "12.5"})'),
            ("test_reverse_string", 'jmespath.search("reverse(s)", {"s": "abc"})'),
            ("test_merge", 'jmespath.search("merge(a, b)", {"a": {"x": 1}, "b": {"x": 2, "y": 3}})'),
        )),
        TestFile("lexer", "jmespath/lexer.py", "from jmespath.lexer import Lexer", (
            ("test_tokens", '[t["type"] for t in Lexer().tokenize("a.b[0]")]'),
            ("test_number_token", '[t["value"] for t in Lexer().tokenize("[-12]") if t["type"] == "number"]'),
            ("test_quoted_identifier", '[t["value"] for t in Lexer().tokenize(\'"with space"\')][:1]'),
            ("test_comparators", '[t["type"] for t in Lexer().tokenize("a <= b != c")]'),
            ("test_literal", '[t["value"] for t in Lexer().tokenize("`[1, 2]`")][:1]'),
        )),
    )),
    Tree("h11", "0.16.0", ("h11",), "MIT", (
        TestFile("headers", "h11/_headers.py",
                 "from h11._headers import normalize_and_validate, get_comma_header, set_comma_header", (
            ("test_normalize_lowercases", 'list(normalize_and_validate([("Content-Length", "10"), ("Host", "x")]))'),
            ("test_duplicate_content_length", 'list(normalize_and_validate([("Content-Length", "10"), ("Content-Length", "10")]))'),
            ("test_chunked", 'list(normalize_and_validate([("Transfer-Encoding", "Chunked")]))'),
            ("test_comma_header", 'get_comma_header(normalize_and_validate([("Connection", "close, Upgrade"), ("Connection", "keep-alive")]), b"connection")'),
            ("test_set_comma_header", 'list(set_comma_header(normalize_and_validate([("Host", "x"), ("Connection", "close")]), b"connection", [b"upgrade"]))'),
        )),
        TestFile("connection", "h11/_connection.py", "import h11", (
            ("test_request_bytes", 'h11.Connection(h11.CLIENT).send(h11.Request(method="GET", target="/x", headers=[("Host", "example.com")]))'),
            ("test_response_roundtrip", '(lambda c: (c.receive_data(b"HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\n\\r\\nhi"), [type(e).__name__ for e in [c.next_event(), c.next_event(), c.next_event()]])[1])((lambda c: (c.send(h11.Request(method="GET", target="/", headers=[("Host", "a")])), c.send(h11.EndOfMessage()), c)[2])(h11.Connection(h11.CLIENT)))'),
            ("test_keep_alive_default", '(lambda c: (c.send(h11.Request(method="GET", target="/", headers=[("Host", "a")])), c.our_state)[1])(h11.Connection(h11.CLIENT)) == h11.SEND_BODY'),
            ("test_server_parses_request", '(lambda c: (c.receive_data(b"POST /p HTTP/1.1\\r\\nHost: a\\r\\nContent-Length: 3\\r\\n\\r\\nabc"), c.next_event().target, bytes(c.next_event().data))[1:])(h11.Connection(h11.SERVER))'),
            ("test_chunked_response", '(lambda c: (c.receive_data(b"GET / HTTP/1.1\\r\\nHost: a\\r\\n\\r\\n"), c.next_event(), c.next_event(), c.send(h11.Response(status_code=200, headers=[("Transfer-Encoding", "chunked")])), c.send(h11.Data(data=b"abc")))[-1])(h11.Connection(h11.SERVER))'),
            ("test_close_header", '(lambda c: (c.send(h11.Request(method="GET", target="/", headers=[("Host", "a"), ("Connection", "close")])), c.send(h11.EndOfMessage()), c.our_state)[-1])(h11.Connection(h11.CLIENT)) == h11.MUST_CLOSE'),
        )),
    )),
)
