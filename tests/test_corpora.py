"Corpora: the two real corpora (sizes, rule), the held-out splits (seeded, disjoint, test-only words removed) and bad input."
import numpy as np, pytest, scipy.sparse as sp
from vgi_lit.corpora import (Corpus, load_reuters, load_news_articles, split_documents, split_words, tokenize,
                             corpus_from_tokens, read_ldac, REUTERS_SIZE)
from vgi_lit.datasets import DataNotFoundError, ENV_VAR


@pytest.fixture(scope="module")
def reuters(): return load_reuters()


def test_reuters_sizes_and_vocab(reuters):
    assert (reuters.n_docs, reuters.n_vocab, reuters.n_tokens) == REUTERS_SIZE
    assert reuters.vocab[:3] == ["church", "pope", "years"] and reuters.titles[0].startswith("0 UK: Prince Charles")
    assert reuters.counts.dtype == np.int64 and reuters.counts.data.min() >= 1


def test_news_rule_holds():
    news = load_news_articles()
    assert news.info["empty"] == 36 and news.info["articles"] == 3824
    assert news.n_docs == 3824 - 36 - news.info["documents_short"]
    tot = np.asarray(news.counts.sum(axis=0)).ravel()           # the kept documents' counts
    assert news.n_vocab == 11_058 and news.info["words_only_in_short"] == 0
    assert tot.min() > 10                                          # no word at <= 10 occurrences, even after step 5
    assert news.doc_lengths.min() > 10                            # documents with <= 10 words removed
    df = np.diff(news.counts.tocsc().indptr)
    assert df.max() <= 0.5 * (news.n_docs + news.info["documents_short"])
    assert not set(news.vocab) & {"the", "and", "said"} and all(w.isalpha() and w.islower() and len(w) >= 3 for w in news.vocab)
    assert news.vocab == sorted(news.vocab)


def test_split_documents(reuters):
    tr, te = split_documents(reuters, 0.2, seed=3)
    assert set(tr.titles).isdisjoint(te.titles) and tr.n_docs + te.n_docs + te.info["split"]["test_docs_emptied"] == 395
    assert tr.vocab == te.vocab and np.asarray(tr.counts.sum(axis=0)).min() >= 1
    assert te.n_vocab == reuters.n_vocab - te.info["split"]["words_test_only"]
    assert te.n_tokens + te.info["split"]["tokens_test_only"] + tr.n_tokens == reuters.n_tokens
    tr2, te2 = split_documents(reuters, 0.2, seed=3)
    assert te2.titles == te.titles and (te2.counts != te.counts).nnz == 0
    assert split_documents(reuters, 0.2, seed=4)[1].titles != te.titles


def test_split_words(reuters):
    a, b = split_words(reuters, seed=0)
    assert (a.counts + b.counts != reuters.counts).nnz == 0
    assert np.array_equal(a.doc_lengths, reuters.doc_lengths // 2)
    a2, _ = split_words(reuters, seed=0); a3, _ = split_words(reuters, seed=1)
    assert (a2.counts != a.counts).nnz == 0 and (a3.counts != a.counts).nnz > 0
    # a random half, not the lowest word ids: the first half's mean word id is close to the whole document's
    ids = reuters.counts.indices; assert abs(a.counts.indices.mean() - ids.mean()) < 0.05 * ids.mean()


def test_bad_input(tmp_path, reuters, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)                     # the missing-file errors below: only tmp_path is searched
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    with pytest.raises(ValueError, match="scipy.sparse"): Corpus(np.ones((2, 2), int), ["a", "b"], ["x", "y"])
    with pytest.raises(ValueError, match="titles"): Corpus(sp.csr_matrix(np.ones((2, 2), int)), ["a", "b"], ["x"])
    with pytest.raises(ValueError, match="test_frac"): split_documents(reuters, 1.0)
    with pytest.raises(ValueError, match="Corpus"): split_words(reuters.counts)
    with pytest.raises(ValueError, match="text"): tokenize(None)
    with pytest.raises(ValueError, match="max_doc_frac"): corpus_from_tokens([["a"]], ["t"], max_doc_frac=0)
    f = tmp_path / "bad.ldac"; f.write_text("2 0:1\n")
    with pytest.raises(ValueError, match="says 2 distinct words"): read_ldac(f, 5)
    f.write_text("1 7:1\n")
    with pytest.raises(ValueError, match="out of range"): read_ldac(f, 5)
    with pytest.raises(DataNotFoundError, match="reuters.ldac"): load_reuters(data_dir=tmp_path, download=False)
    with pytest.raises(DataNotFoundError, match="NewsArticles.zip"): load_news_articles(data_dir=tmp_path, download=False)


def test_no_zero_column_after_document_step():
    "A word above the count threshold whose every occurrence is in a removed short document leaves no empty column."
    docs = [["a", "b", "c"], ["a", "b", "c"], ["z", "z"]]
    c = corpus_from_tokens(docs, ["d0", "d1", "d2"], min_count=1, max_doc_frac=1.0, min_doc_words=2)
    assert c.vocab == ["a", "b", "c"] and c.n_docs == 2 and np.asarray(c.counts.sum(axis=0)).min() >= 1
    assert c.info["documents_short"] == 1 and c.info["words_only_in_short"] == 1 and c.info["short_titles"] == ["d2"]
