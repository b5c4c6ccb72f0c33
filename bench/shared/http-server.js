// One server of the HTTP part, in its own process: `node bench/shared/http-server.js <kind>`.
//
// Started with an IPC channel by bench/shared/http-rounds.js (and pinned with `taskset -c 0`) or, under
// callgrind, by bench/shared/callgrind.js. It listens on a free loopback port and reports it; then, for each measured round, the parent sends 'start' and 'stop' and the
// server answers with its own CPU time (process.cpuUsage: user + system, every thread of the
// process) and the requests it received in between. The measured route does nothing extra: the
// counter is a listener on the HTTP server, the same in every kind, and the control messages go
// over IPC, outside the measured route and outside the measured window. bench/shared/callgrind.js also
// asks how many major garbage collections fell in its counted window ('watch', 'collections').

import { PerformanceObserver, constants } from 'node:perf_hooks'
import { buildTokenApp } from './apps.js'

const kind = process.argv[2]
const app = await buildTokenApp(kind)
let requests = 0
app.server.on('request', () => { requests++ })
await app.listen({ host: '127.0.0.1', port: 0 })

let majorCollections = 0
let majorFrom = Infinity
let observer = null

function observeMajorCollections () {
  if (observer !== null) return
  observer = new PerformanceObserver(list => {
    for (const entry of list.getEntries()) {
      if (entry.detail.kind === constants.NODE_PERFORMANCE_GC_MAJOR && entry.startTime >= majorFrom) majorCollections++
    }
  })
  observer.observe({ entryTypes: ['gc'] })
}

let startCpu = null
let startRequests = 0
let startTime = 0n

process.on('message', message => {
  if (message.cmd === 'start') {
    startRequests = requests
    startTime = process.hrtime.bigint()
    startCpu = process.cpuUsage()
    process.send({ cmd: 'started' })
  } else if (message.cmd === 'stop') {
    const cpu = process.cpuUsage(startCpu)
    const wallMs = Number(process.hrtime.bigint() - startTime) / 1e6
    process.send({ cmd: 'stopped', cpuMicros: cpu.user + cpu.system, requests: requests - startRequests, wallMs })
  } else if (message.cmd === 'watch') {
    // bench/shared/callgrind.js only: counts the major collections from here on, which 'collections' reports.
    observeMajorCollections()
    majorCollections = 0
    majorFrom = performance.now()
    process.send({ cmd: 'watching' })
  } else if (message.cmd === 'collections') {
    // The observer hears of a collection after it ends, on a later turn of the loop.
    setTimeout(() => { process.send({ cmd: 'collections', major: majorCollections }) }, 100)
  } else if (message.cmd === 'exit') {
    app.close().then(() => process.exit(0))
  }
})

// The parent gone (a part that failed, a test that timed out), nothing is left serving on a core.
process.on('disconnect', () => process.exit(0))

process.send({ cmd: 'ready', kind, port: app.server.address().port, pid: process.pid })
