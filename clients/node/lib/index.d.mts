export * from './index.cjs'
import * as lib from './index.cjs'
export default lib
