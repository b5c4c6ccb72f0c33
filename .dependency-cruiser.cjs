// The floors of lib/, checked by `npm run lint:floors` (part of `npm test`). Imports run down only:
//   limits.ts, values.ts          bounds and value helpers, importing nothing of lib/
//   bucket/, keys/                the bucket arithmetic; reading keys from requests' values
//   store.ts                      the store contract: bucket/ only, nothing of Fastify
//   paces/                        the named paces every request and every operator goes through
//   redis/                        the RedisStore
//   http/                         the Fastify plugin
//   operator/                     the CLI
// with lib/index.ts on top, and no import circle anywhere (type-only imports count).
const floor = (name, path, below) => ({
  name,
  severity: 'error',
  from: { path },
  to: { path: '^lib/', pathNot: [path, ...below] }
})

module.exports = {
  forbidden: [
    { name: 'no-circular', severity: 'error', from: {}, to: { circular: true } },
    floor('limits-and-values-import-nothing', '^lib/(limits|values)\\.ts$', []),
    floor('bucket-stands-alone', '^lib/bucket/', ['^lib/limits\\.ts$', '^lib/values\\.ts$']),
    floor('keys-stand-alone', '^lib/keys/', ['^lib/limits\\.ts$', '^lib/values\\.ts$']),
    floor('store-contract-on-the-bucket', '^lib/store\\.ts$', ['^lib/bucket/', '^lib/limits\\.ts$']),
    floor('paces-below-the-plugin', '^lib/paces/', ['^lib/(bucket|keys)/', '^lib/(store|limits|values)\\.ts$']),
    floor('redis-below-the-plugin', '^lib/redis/', ['^lib/bucket/', '^lib/(store|limits|values)\\.ts$']),
    floor('plugin-below-the-cli', '^lib/http/', ['^lib/(bucket|keys|paces)/', '^lib/(store|limits|values)\\.ts$']),
    floor('cli-beside-the-plugin', '^lib/operator/', ['^lib/(bucket|keys|paces|redis)/', '^lib/(store|limits|values)\\.ts$']),
    {
      name: 'no-fastify-in-the-arithmetic-or-the-contract',
      severity: 'error',
      from: { path: '^lib/((bucket|keys)/|(store|limits|values)\\.ts$)' },
      to: { path: 'node_modules/fastify' }
    }
  ],
  options: {
    tsPreCompilationDeps: true,
    doNotFollow: { path: 'node_modules' },
    tsConfig: { fileName: 'tsconfig.json' }
  }
}
