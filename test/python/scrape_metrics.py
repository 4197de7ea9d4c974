"""Scrapes a Prometheus endpoint as Prometheus would (a GET with a bearer token) and parses it with
prometheus_client's own parser of the text format. Prints, as JSON: {"status", "content_type",
"families": [{"name", "type", "help", "samples": [{"name", "labels", "value"}]}]} — families in
the order the parser yielded them, so a family written twice shows twice. A text the parser
refuses exits non-zero with its error.

usage: scrape_metrics.py URL TOKEN
"""
import json
import sys
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def main() -> None:
    url, token = sys.argv[1:3]
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as res:
            status, content_type, text = res.status, res.headers.get("content-type"), res.read().decode("utf-8")
    except urllib.error.HTTPError as e:
        print(json.dumps({"status": e.code, "content_type": e.headers.get("content-type"), "families": []}))
        return
    families = [
        {
            "name": f.name,
            "type": f.type,
            "help": f.documentation,
            "samples": [{"name": s.name, "labels": s.labels, "value": s.value} for s in f.samples],
        }
        for f in text_string_to_metric_families(text)
    ]
    print(json.dumps({"status": status, "content_type": content_type, "families": families}))


if __name__ == "__main__":
    main()
