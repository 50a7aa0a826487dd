// lock-admin's explorer: re-reads the live section every two seconds (the same query the
// page was opened with) and swaps it in; says so when a read fails, keeping the last rows.
// No framework: the page works without this script too (reload to refresh).
(function () {
  const live = document.getElementById('live');
  const status = document.getElementById('live-status');
  if (!live || !status) return;
  const url = '/explorer/rows' + window.location.search;
  async function refresh() {
    try {
      const r = await fetch(url, { credentials: 'same-origin', cache: 'no-store' });
      if (!r.ok) throw new Error('HTTP ' + r.status);
      live.innerHTML = await r.text();
      status.textContent = 'live: read ' + new Date().toISOString().slice(11, 19) + ' UTC';
      status.classList.remove('stale');
    } catch (e) {
      status.textContent = 'stale: the last read failed (' + e.message + '); retrying';
      status.classList.add('stale');
    }
  }
  setInterval(refresh, 2000);
})();
