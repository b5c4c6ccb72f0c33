// One server of the HTTP part, in its own process: `node bench/http-server.js <kind>`.
//
// Started by bench/http.js with an IPC channel (and `taskset -c 0`). It listens on a free loopback
// port and reports it; then, for each measured round, the parent sends 'start' and 'stop' and the
// server answers with its own CPU time (process.cpuUsage: user + system, every thread of the
// process) and the requests it received in between. The measured route does nothing extra: the
// counter is a listener on the HTTP server, the same in every kind, and the control messages go
// over IPC, outside the measured route and outside the measured window.

import { buildTokenApp } from './apps.js'

const kind = process.argv[2]
const app = await buildTokenApp(kind)
let requests = 0
app.server.on('request', () => { requests++ })
await app.listen({ host: '127.0.0.1', port: 0 })

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
  } else if (message.cmd === 'exit') {
    app.close().then(() => process.exit(0))
  }
})

process.send({ cmd: 'ready', kind, port: app.server.address().port, pid: process.pid })
