"""The TF-IDF + logistic regression baseline the sentiment classifier is compared with (on its card)."""
from __future__ import annotations


def tfidf_baseline(train, test, validation=None) -> dict:
    """TF-IDF (unigrams, sublinear tf) + logistic regression: default C=1, and C picked on validation."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    vec = TfidfVectorizer(sublinear_tf=True)
    X = vec.fit_transform([r.text for r in train])
    y = [r.label for r in train]

    def acc(clf, recs):
        return float((clf.predict(vec.transform([r.text for r in recs])) == [r.label for r in recs]).mean())

    result = {"C=1": acc(LogisticRegression(C=1.0, max_iter=2000).fit(X, y), test)}
    if validation is not None:
        fits = {c: LogisticRegression(C=c, max_iter=2000).fit(X, y) for c in (0.3, 1.0, 3.0, 10.0)}
        best = max(fits, key=lambda c: acc(fits[c], validation))
        result.update({"tuned_C": best, "tuned": acc(fits[best], test)})
    return result

