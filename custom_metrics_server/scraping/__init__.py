"""Scraping the kubelets (or the node agents) into the usage store.

`core.ScrapeCore` is the scraping core under both the kubelet scraper and the pod scraper: the
`rounds`, one target's deadline and failure handling, and the failing targets' book and backoff
(`target_book`). `kubelet_scraper.KubeletScraper` runs on it, fetches each node through
`kubelet_client` (or the agent `node_agents` names) and counts itself in `scraper_metrics`;
`failure.ScrapeFailure` is the one expected failure of a fetch.
"""
