// Opens a report in headless Chromium (Debian's, driven by playwright-core) and prints what a
// reader sees as JSON: the steps shown with their status and whether each is visible, the
// graph and timeline, whether a step's transcript unfolds when its summary is clicked, what the
// page asked the network for, and how long it took to open. Used by tests/cli/report.rs and
// benches/report.rs.
//
//   node open.cjs REPORT.html SCREENSHOT.png STEP_TO_UNFOLD
const { chromium } = require("playwright-core");

const [file, screenshot, unfold] = process.argv.slice(2);

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    // As root in a container, and with no network: nothing in the background may call out.
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const page = await browser.newPage({ viewport: { width: 1300, height: 900 } });
  const requests = [];
  page.on("request", (r) => { if (!r.url().startsWith("file:")) requests.push(r.url()); });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });

  const opening = Date.now();
  await page.goto("file://" + file, { waitUntil: "load" });
  const open_ms = Date.now() - opening;
  const navigation = await page.evaluate(() => {
    const n = performance.getEntriesByType("navigation")[0];
    return { dom_content_loaded_ms: n.domContentLoadedEventEnd, load_ms: n.loadEventEnd };
  });

  const visible = async (selector) => {
    const out = [];
    for (const el of await page.locator(selector).all()) {
      out.push({
        step: await el.getAttribute("data-step"),
        status: await el.getAttribute("data-status"),
        visible: await el.isVisible(),
        text: (await el.innerText()).trim(),
      });
    }
    return out;
  };
  const table = await visible("tr.step-row");
  const graph = await page.$$eval("#graph g.node", (nodes) =>
    nodes.map((n) => ({ step: n.dataset.step, status: n.dataset.status, critical: n.classList.contains("critical") })));
  const edges = await page.locator("#graph path.edge").count();
  const critical_edges = await page.locator("#graph path.edge.critical").count();
  const timeline = await page.$$eval("#timeline g.row", (rows) =>
    rows.map((r) => ({ step: r.dataset.step, status: r.dataset.status,
      bar: !!r.querySelector("rect.bar"), queue: !!r.querySelector("rect.queue"),
      checks: r.querySelectorAll("rect.check").length, critical: r.classList.contains("critical") })));

  let unfolded = null;
  if (unfold) {
    const transcript = page.locator(`details.transcript[data-step="${unfold}"]`).first();
    const turn = transcript.locator(".turn").first();
    const before = await turn.isVisible();
    await transcript.locator(":scope > summary").click();
    const after = await turn.isVisible();
    unfolded = { before, after, text: after ? (await transcript.innerText()) : "" };
  }

  // A failed instance named under its step: following its link unfolds it.
  let followed = null;
  const link = page.locator(".failed-instances a").first();
  if (await link.count()) {
    const target = (await link.getAttribute("href")).slice(1).replace(/-body$/, "");
    const summary = page.locator(`[id="${target}"] > summary`);
    const before = await summary.locator(".status").isVisible();
    await link.click();
    const open = await page.locator(`[id="${target}"]`).evaluate((d) => d.open);
    followed = { target, step: await page.locator(`[id="${target}"]`).getAttribute("data-step"),
      status: await page.locator(`[id="${target}"]`).getAttribute("data-status"), before, open,
      error: open ? (await page.locator(`[id="${target}"] .error-text`).first().innerText()) : "" };
  }

  const facts = await page.evaluate(() => ({
    title: document.title,
    scripts: document.scripts.length,
    external: [...document.querySelectorAll("[src], link[href]")].map((e) => e.outerHTML),
    run_status: document.getElementById("run-status")?.textContent,
    baseline: [...document.querySelectorAll("tr.baseline-row")].map((r) => ({ step: r.dataset.step, change: r.dataset.change })),
    body_text: document.body.innerText,
    // Fact tiles whose text spills out of them (a long branch name, a time).
    overflowing: [...document.querySelectorAll("dl.facts > div")]
      .filter((d) => d.scrollWidth > d.clientWidth + 1
        || d.getBoundingClientRect().right > d.parentElement.getBoundingClientRect().right + 1)
      .map((d) => d.innerText),
    answers: [...document.querySelectorAll("#answer pre.answer")].map((p) => ({ step: p.dataset.step, text: p.innerText })),
    first_section: document.querySelector("main section")?.id,
    errors_shown: [...document.querySelectorAll("pre.error")].map((p) => p.innerText),
  }));
  if (screenshot) await page.screenshot({ path: screenshot, fullPage: true });
  await browser.close();
  process.stdout.write(JSON.stringify({ open_ms, navigation, table, graph, edges, critical_edges,
    timeline, unfolded, followed, requests, errors, ...facts }));
})().catch((e) => { console.error(e); process.exit(1); });
