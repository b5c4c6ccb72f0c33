// `node --import=./test/helpers/typescript.mjs`: loads TypeScript through typescript-hooks.mjs.
import { register } from 'node:module'

register('./typescript-hooks.mjs', import.meta.url)
