"""Scraping the kubelets (or the node agents) into the usage store.

`kubelet_scraper.KubeletScraper` runs `rounds` (shared with the pod scraper), fetches each node
through `kubelet_client` (or the agent `node_agents` names), keeps the failing nodes' backoff in
`node_book` and counts itself in `scraper_metrics`; `failure.ScrapeFailure` is the one expected
failure of a fetch.
"""
