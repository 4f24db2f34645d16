// scrape.mjs - scrapes Prometheus endpoints at a fixed rate from a process
// of its own, so that the latencies measured are the servers' and the
// network's, not the time a busy test process (SDK streams, HAProxy
// polling) takes to get back to its event loop.
//
//   node scrape.mjs HZ SECONDS URL...
//
// Prints one JSON line: {"URL": {"ms": [per-scrape wall ms], "server":
// [the server's own wall ms from Server-Timing], "last": text, "status":
// [statuses]}}. Each scrape is a fresh connection, as
// Prometheus's scrapers mostly are at 50 ms intervals behind a router.
import http from "node:http";

const [hz, seconds, ...urls] = process.argv.slice(2);
const out = Object.fromEntries(urls.map((u) => [u, { ms: [], server: [], status: [], last: "" }]));
const get = (url) => new Promise((resolve) => {
  const t = process.hrtime.bigint();
  const req = http.get(url, { agent: false }, (res) => {
    let body = "";
    res.setEncoding("utf8");
    res.on("data", (d) => { body += d; });
    const timing = /dur=([\d.]+)/.exec(res.headers["server-timing"] || "");
    res.on("end", () => resolve({ ms: Number(process.hrtime.bigint() - t) / 1e6, status: res.statusCode, body,
      server: timing ? Number(timing[1]) : NaN }));
  });
  req.on("error", (e) => resolve({ ms: Number(process.hrtime.bigint() - t) / 1e6, status: 0, body: String(e) }));
});
const end = Date.now() + Number(seconds) * 1000;
const period = 1000 / Number(hz);
for (let next = Date.now(); Date.now() < end; next += period) {
  const got = await Promise.all(urls.map(get));
  got.forEach((g, i) => {
    const o = out[urls[i]];
    o.ms.push(g.ms);
    o.server.push(g.server);
    o.status.push(g.status);
    o.last = g.body;
  });
  const wait = next + period - Date.now();
  if (wait > 0) await new Promise((r) => setTimeout(r, wait));
}
process.stdout.write(JSON.stringify(out) + "\n");
