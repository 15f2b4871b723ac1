"""Compare luminal's C++ tokenizer (through `luminal tokenize`) with Hugging Face `tokenizers`.

Every tokenizer here is built in the test itself with the `tokenizers` library (no
downloads): the shipped default-model tokenizer, plus Llama-3-, Qwen-2- and GPT-2-style
byte-level BPEs trained in a second on a small corpus. For a varied text corpus the ids
from the CLI must be identical to `tokenizers`' ids, and decoding must agree too.
"""
from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest

import tokenizers  # noqa: E402  (a missing dependency fails the run, it never skips it)
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

FORTUNES = Path("/usr/share/games/fortunes")

TEXTS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "It's, I'm, you're, we've, they'll, he'd, IT'S, I'M, DON'T, y'all'd've",
    "Numbers: 1234567 and 3.14159, 42, 007, 1,000,000 and 12345678901234567890; ½ ² ٣٤٥ ⅷ",
    "def foo(x):\n    return x**2 + 1  # comment\n\n\nclass Bar:\n\tpass\n",
    'int main() { std::vector<int> v{1,2,3}; for (auto& x : v) printf("%d\\n", x); return 0; }',
    "multiple   spaces    here     and\ttabs\t\tand\n\n\nnewlines\r\nwindows\r\n  \n \n",
    "   leading and trailing spaces   ",
    "\n\nleading newlines and trailing ones\n\n",
    "Café naïve résumé façade Ångström — “quotes” ‘single’ … «guillemets»",
    "e\u0301 combining accent, \u00e9 precomposed, ﬁ ligature, Ｆｕｌｌｗｉｄｔｈ, Å vs \u212b",
    "中文字符测试，日本語のテキスト、한국어 텍스트。",
    "Emoji: 🎉🚀👍🏽 👨‍👩‍👧‍👦 ❤️ 🇫🇷 and 😀😀😀",
    "Mixed: Привет мир! Γειά σου Κόσμε! مرحبا بالعالم שלום עולם नमस्ते दुनिया ภาษาไทย",
    "",
    " ",
    "a",
    "\u0085NEL\u00a0nbsp\u2028ls\u3000ideographic\u200bzero-width\u001cfs",
    "URL: https://example.com/path?q=1&r=two#frag email: someone@example.org",
    "$$$ %%% ^^^ &&& *** ((( ))) --- +++ === [[[ ]]] {{{ }}} ||| \\\\ ;;; ::: ''' \"\"\" <<< >>> ,,, ... ??? ///",
    "x" * 300,
    "ab " * 100,
    "ſ K 'ſ 'K The Kelvin sign and long s fold case-insensitively",
    "Q: What do you get when you cross a mosquito with a rock climber?\n"
    "A: Nothing, you can't cross a vector and a scalar.\n\t\t-- Anonymous",
]


def special_texts(specials: list[str]) -> list[str]:
    a, b = specials[0], specials[-1]
    return [
        f"{a}",
        f"special {a} inside {b}text{b}{b} end",
        f"{a}Hello{b}  {a} spaced {b}\n",
        f"partial <|end_of_tex and <|begin_of_text and {a[:-1]}",
    ]


def corpus() -> list[str]:
    docs = list(TEXTS)
    if FORTUNES.is_dir():
        for name in ("fortunes", "computers", "science", "wisdom"):
            f = FORTUNES / name
            if f.is_file():
                docs.extend(d.strip() for d in f.read_text(errors="replace").split("\n%\n") if d.strip())
    docs.extend(["The cat sat on the mat. " * 5, "def f(a, b):\n    return a + b\n" * 3,
                 "Un été à Paris, où l'on mange des crêpes. 東京は大きい都市です。"] * 20)
    return docs


def train(tok: Tokenizer, specials: list[str], vocab: int = 1200) -> Tokenizer:
    trainer = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(), trainer=trainer)
    return tok


def merges_to_string_form(path: Path) -> None:
    """Rewrite ["a", "b"] merges as the older "a b" strings (byte-level tokens never hold spaces)."""
    j = json.loads(path.read_text())
    j["model"]["merges"] = [m if isinstance(m, str) else f"{m[0]} {m[1]}" for m in j["model"]["merges"]]
    path.write_text(json.dumps(j, ensure_ascii=False))


def build_llama3(d: Path) -> tuple[Path, list[str]]:
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    train(tok, specials)
    bos = tok.token_to_id(specials[0])
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    p = d / "tokenizer.json"
    tok.save(str(p))
    return p, specials


def build_qwen2(d: Path) -> tuple[Path, list[str]]:
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    train(tok, specials)
    # A non-special added token, as Qwen's <tool_call>.
    tok.add_tokens([AddedToken("<tool_call>", special=False, normalized=False)])
    p = d / "tokenizer.json"
    tok.save(str(p))
    return p, specials


def build_gpt2(d: Path) -> tuple[Path, list[str]]:
    specials = ["<|endoftext|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    train(tok, specials)
    p = d / "tokenizer.json"
    tok.save(str(p))
    merges_to_string_form(p)
    return p, specials


def build_gpt2_prefix_space(d: Path) -> tuple[Path, list[str]]:
    """ByteLevel(add_prefix_space) after Digits, with lstrip/rstrip/single_word added tokens."""
    specials = ["<s>", "</s>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    train(tok, specials, vocab=800)
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=False, special=True, normalized=False),
                            AddedToken("[SEP]", lstrip=False, rstrip=True, special=True, normalized=False)])
    tok.add_tokens([AddedToken("word", single_word=True, special=False)])
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")),
                                                      ("<s>", tok.token_to_id("<s>")))
    p = d / "tokenizer.json"
    tok.save(str(p))
    return p, ["<mask>", "[SEP]", "<s>"]


def build_split_behaviors(d: Path) -> tuple[Path, list[str]]:
    """Every Split behaviour, String and Regex patterns, invert; then ByteLevel without regex."""
    specials = ["<|endoftext|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split("-", behavior="merged_with_previous"),
        pre_tokenizers.Split(Regex(r"\d+"), behavior="merged_with_next"),
        pre_tokenizers.Split(Regex(r"[aeiou]"), behavior="contiguous"),
        pre_tokenizers.Split(Regex(r"[^\s]+"), behavior="isolated", invert=True),
        pre_tokenizers.Split(Regex(r"\t+"), behavior="removed"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    train(tok, specials, vocab=600)
    p = d / "tokenizer.json"
    tok.save(str(p))
    return p, specials


EXTRA_TEXTS = {
    "llama3": ["<|start_header_id|>user<|end_header_id|>\n\nHi there!<|eot_id|>"
               "<|start_header_id|>assistant<|end_header_id|>\n\n"],
    "qwen2": ["<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nhé<|im_end|>\n",
              "call <tool_call>{\"name\": \"f\"}</tool_call> done"],
    "gpt2_prefix": ["hello <mask> world", "a   <mask>b", "[SEP]   after [SEP]\n\nx", "sword word words word. word",
                    "12345 67 8", "½word ²word word\u200d word_ wordé (word)"],
}


@pytest.fixture(scope="module")
def tokenizer_files(tmp_path_factory, repo_root) -> dict[str, tuple[Path, list[str]]]:
    out: dict[str, tuple[Path, list[str]]] = {}
    shipped = repo_root / "models" / "default" / "tokenizer.json"
    if shipped.is_file():
        out["default"] = (shipped, ["<|begin_of_text|>", "<|end_of_text|>"])
    for name, build in [("llama3", build_llama3), ("qwen2", build_qwen2), ("gpt2", build_gpt2),
                        ("gpt2_prefix", build_gpt2_prefix_space), ("splits", build_split_behaviors)]:
        d = tmp_path_factory.mktemp(name)
        out[name] = build(d)
    return out


NAMES = ["default", "llama3", "qwen2", "gpt2", "gpt2_prefix", "splits"]


def run_cli(binary: Path, tok_path: Path, lines: list, *flags: str) -> list:
    payload = "".join(json.dumps(x) + "\n" for x in lines)
    r = subprocess.run([str(binary), "tokenize", "--tokenizer", str(tok_path), "--lines", *flags],
                       input=payload.encode(), capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    out = [json.loads(l) for l in r.stdout.decode().split("\n") if l]
    assert len(out) == len(lines)
    return out


def texts_for(name: str, specials: list[str]) -> list[str]:
    texts = TEXTS + special_texts(specials) + EXTRA_TEXTS.get(name, [])
    if FORTUNES.is_dir():  # some real fortunes, unseen by the small test tokenizers
        docs = (FORTUNES / "pratchett").read_text(errors="replace").split("\n%\n") if (FORTUNES / "pratchett").is_file() else []
        texts += [d for d in docs[:150] if d.strip()]
    return texts


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("add_special", [True, False])
def test_encode_matches_tokenizers(luminal_bin, tokenizer_files, name, add_special):
    if name not in tokenizer_files:
        pytest.fail("models/default/tokenizer.json not present: the shipped default model is missing")
    path, specials = tokenizer_files[name]
    hf = Tokenizer.from_file(str(path))
    texts = texts_for(name, specials)
    got = run_cli(luminal_bin, path, texts, *([] if add_special else ["--no-special"]))
    for text, ids in zip(texts, got):
        want = hf.encode(text, add_special_tokens=add_special).ids
        assert ids == want, f"{name}: mismatch for {text!r}\n  luminal:    {ids}\n  tokenizers: {want}"


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("skip_special", [False, True])
def test_decode_matches_tokenizers(luminal_bin, tokenizer_files, name, skip_special):
    if name not in tokenizer_files:
        pytest.fail("models/default/tokenizer.json not present: the shipped default model is missing")
    path, specials = tokenizer_files[name]
    hf = Tokenizer.from_file(str(path))
    texts = texts_for(name, specials)
    id_lists = [hf.encode(t).ids for t in texts]
    rng = random.Random(0)  # arbitrary id sequences, including ones that split UTF-8 characters
    id_lists += [[rng.randrange(hf.get_vocab_size()) for _ in range(rng.randint(1, 24))] for _ in range(100)]
    got = run_cli(luminal_bin, path, id_lists, "--decode", *(["--skip-special"] if skip_special else []))
    for ids, text in zip(id_lists, got):
        want = hf.decode(ids, skip_special_tokens=skip_special)
        assert text == want, f"{name}: decode mismatch for {ids}\n  luminal:    {text!r}\n  tokenizers: {want!r}"


@pytest.mark.parametrize("name", NAMES)
def test_round_trip(luminal_bin, tokenizer_files, name):
    if name not in tokenizer_files:
        pytest.fail("models/default/tokenizer.json not present: the shipped default model is missing")
    path, specials = tokenizer_files[name]
    texts = [t for t in texts_for(name, specials) if "\u0301" not in t and "\u212b" not in t]  # NFC changes those
    ids = run_cli(luminal_bin, path, texts, "--no-special")
    back = run_cli(luminal_bin, path, ids, "--decode")
    for t, b in zip(texts, back):
        if name in ("gpt2_prefix", "splits"):  # add_prefix_space adds spaces, "removed" drops tabs
            continue
        assert b == t


FUZZ_POOL = list("abcXYZ  \t\n\r\x0b\x0c\x85\xa0\u2028\u3000\u200b'sStTdDmM0123456789٣½.,!?-_()[]{}<>|/\\\"#@$%^&*~`") + \
    list("éÉàñüßøÅ\u0301\u0308ſK中文日本語한국어🎉👍🏽\u200d❤️🇫🇷Привет") + \
    ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|endoftext|>", "<mask>", "[SEP]", "word", " word ",
     "<|eot_id|>", "<tool_call>", "'ll", "'RE", "  \n", "1234"]


@pytest.mark.parametrize("name", NAMES)
def test_random_strings_match(luminal_bin, tokenizer_files, name):
    """Seeded fuzzing: random mixtures of tricky characters and token fragments."""
    if name not in tokenizer_files:
        pytest.fail("models/default/tokenizer.json not present: the shipped default model is missing")
    path, _ = tokenizer_files[name]
    hf = Tokenizer.from_file(str(path))
    rng = random.Random(1234)
    texts = ["".join(rng.choice(FUZZ_POOL) for _ in range(rng.randint(0, 40))) for _ in range(1500)]
    got = run_cli(luminal_bin, path, texts)
    bad = [(t, g, hf.encode(t).ids) for t, g in zip(texts, got) if g != hf.encode(t).ids]
    assert not bad, f"{len(bad)} mismatches, first: {bad[0]}"


def test_plain_stdin_mode(luminal_bin, tokenizer_files):
    path, _ = tokenizer_files["gpt2"]
    hf = Tokenizer.from_file(str(path))
    text = "Plain mode: the whole of stdin is one text.\nSecond line.\n"
    r = subprocess.run([str(luminal_bin), "tokenize", "--tokenizer", str(path)], input=text.encode(),
                       capture_output=True, check=True)
    ids = json.loads(r.stdout)
    assert ids == hf.encode(text).ids
    r = subprocess.run([str(luminal_bin), "tokenize", "--tokenizer", str(path.parent), "--decode"],
                       input=json.dumps(ids).encode(), capture_output=True, check=True)
    assert r.stdout.decode() == text


def test_errors_are_reported(luminal_bin, tmp_path):
    def run(path: Path) -> subprocess.CompletedProcess:
        return subprocess.run([str(luminal_bin), "tokenize", "--tokenizer", str(path)], input=b"hi",
                              capture_output=True)

    r = run(tmp_path / "nope.json")
    assert r.returncode != 0 and b"nope.json" in r.stderr and b"not found" in r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{ this is not json")
    r = run(bad)
    assert r.returncode != 0 and b"bad.json" in r.stderr and b"malformed JSON" in r.stderr
    wp = tmp_path / "wordpiece.json"
    wp.write_text(json.dumps({"model": {"type": "WordPiece", "vocab": {"a": 0}}}))
    r = run(wp)
    assert r.returncode != 0 and b"WordPiece" in r.stderr and b"wordpiece.json" in r.stderr
