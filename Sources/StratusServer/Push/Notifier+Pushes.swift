import Foundation
import StratusCore
import StratusStore

extension Notifier {
    /// Queues a push of each notification to every device its subscriber registered (APNs devices
    /// only where the environment has an APNs credential), and wakes this process's sender. Runs
    /// after the write committed and before it is answered, as the courier's queueing does.
    func queuePushes(_ made: [Made], key: Key) async throws {
        guard let pushes, !made.isEmpty else { return }
        let devices = try await pushDevices(of: Set(made.map(\.pending.owner)), key: key)
        guard !devices.isEmpty else { return }
        var apns: Bool?
        var rows: [OutgoingPush] = []
        for item in made {
            guard let targets = devices[item.pending.owner], !targets.isEmpty,
                  let id = item.json["ck"]?["nid"]?.stringValue.flatMap(UUID.init(uuidString:)) else { continue }
            for device in targets {
                let message: PushMessage?
                switch device.address {
                case .apns:
                    if apns == nil { apns = await pushes.hasAPNs(containerID: key.containerID, environment: key.environment) }
                    guard apns == true else { continue }
                    message = PushMessage.make(item.json, limit: PushMessage.apnsLimit)
                case .webPush:
                    message = PushMessage.make(item.json, limit: WebPushEncryption.maximumContent, addingContentAvailable: false)
                }
                guard let message else {
                    logger.warning("a notification too large to push even cut was not pushed", metadata: ["stratus.container": "\(key.containerID)"])
                    continue
                }
                rows.append(OutgoingPush(containerID: key.containerID, pushID: id, environment: key.environment, address: device.address,
                                         payload: message.body, alert: message.alert, collapseID: message.collapseID))
            }
        }
        guard !rows.isEmpty else { return }
        // Written claimed by this process for a lease, and handed to its sender.
        try await records.subscriptions.queuePushes(rows, lease: PushDispatcher.lease)
        pushes.queued(rows)
    }

    /// The push devices of `owners` that have any, from memory or one statement for those not known.
    func pushDevices(of owners: Set<UserID>, key: Key) async throws -> [UserID: [PushDevice]] {
        try await devices.values(of: owners, containerID: key.containerID, environment: key.environment) { missing in
            try await records.subscriptions.pushDevices(containerID: key.containerID, environment: key.environment, users: missing)
        }
    }
}
