// The ESM entry of accord: the same API as the CommonJS entry (loader.js, over napi-rs's index.js).
import accord from './loader.js'

export const {
  Client,
  ERROR_CODES,
  Election,
  Fleet,
  Leadership,
  Lease,
  Member,
  MemberWatch,
  Observer,
  Semaphore,
  ShardLease,
  StreamSubscription,
  Subscription,
  closeAll,
  connect,
  migrationSql,
} = accord
export default accord
