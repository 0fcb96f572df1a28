import Foundation
import Hummingbird
import StratusCore
import StratusStore

extension StratusApp {
    /// The routes of `ManagedRecordsController`.
    func addManagedRecordRoutes(to router: Router<BasicRequestContext>) {
        for operation in ManagedRecordsController.Operation.allCases {
            manage(router, operation.route) { call in
                .json(try await self.managedRecords.run(operation, grant: call.grant, body: try call.object()))
            }
        }
    }
}
